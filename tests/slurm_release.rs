//! What hadar relies on in Slurm, checked on the release the suite runs against
//! (`HADAR_SLURM`, see `tests/slurm-env`): the JSON and text answers read alike, a held job's
//! nodes and GPUs can be updated, its GPU types changed (where the release allows), requeue
//! and hold, heterogeneous jobs, `sbatch --uid/--gid`, `scontrol write batch_script` and the
//! comment as a job's progress channel. The whole cluster runs in the Asia/Kolkata time zone
//! (UTC+05:30), and so does the daemon of the last scenario, which checks the times it
//! records against the wall clock. Each scenario prints what it saw, for
//! `docs/slurm-releases.md`. `harness = false`: arguments are name filters.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm::{ReadForm, SlurmRelease, job, json, node};
use hadar_slurm_testbed::{Options, Scenario, Testbed, run_scenarios};
use serve::*;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

/// A zone with a half-hour offset and no daylight saving: any time read in the wrong zone is
/// off by 19,800 s.
const ZONE: &str = "Asia/Kolkata";

const SCENARIOS: &[Scenario] = &[
    (
        "json_and_text_read_the_same_jobs_and_nodes",
        json_and_text_read_the_same_jobs_and_nodes,
    ),
    (
        "a_held_jobs_nodes_and_gpu_count_can_be_updated",
        a_held_jobs_nodes_and_gpu_count_can_be_updated,
    ),
    (
        "a_held_jobs_gpu_types_change_as_the_release_allows",
        a_held_jobs_gpu_types_change_as_the_release_allows,
    ),
    (
        "a_requeued_held_job_runs_again_when_released",
        a_requeued_held_job_runs_again_when_released,
    ),
    (
        "an_ended_job_is_requeued_unless_incomplete_is_given",
        an_ended_job_is_requeued_unless_incomplete_is_given,
    ),
    (
        "a_heterogeneous_job_starts_and_names_its_scheduler",
        a_heterogeneous_job_starts_and_names_its_scheduler,
    ),
    (
        "a_job_submitted_for_a_user_runs_as_that_user_and_reports_by_comment",
        a_job_submitted_for_a_user_runs_as_that_user_and_reports_by_comment,
    ),
    (
        "a_daemon_outside_utc_records_times_by_the_wall_clock",
        a_daemon_outside_utc_records_times_by_the_wall_clock,
    ),
];

fn main() -> ExitCode {
    let mut options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("release-testbed"));
    options.time_zone = Some(ZONE.to_string());
    run_scenarios(SCENARIOS, options, cancel_and_wait_empty)
}

fn cancel_and_wait_empty(bed: &Testbed) {
    let _ = bed.cancel_all();
    wait_queue_empty(bed);
}

fn release() -> SlurmRelease {
    let text = hadar_slurm_testbed::slurm_release().expect("slurmctld -V");
    SlurmRelease::parse(&text).expect("a release number")
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn scontrol(bed: &Testbed, args: &[&str]) -> String {
    bed.client("scontrol", args)
        .unwrap_or_else(|e| panic!("scontrol {args:?}: {e}"))
}

fn assert_completed(info: &hadar_slurm_testbed::JobInfo) {
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        info.0
    );
}

/// An unmanaged job (partition `cpu` is not managed) that Slurm alone schedules.
fn plain(bed: &Testbed, args: &[&str]) -> u32 {
    let mut all = vec!["-p", "cpu", "-o", "/dev/null"];
    all.extend_from_slice(args);
    let sub = bed.sbatch(&all, None);
    assert!(sub.ok, "sbatch {all:?}: {}", sub.stderr);
    sub.job_id.expect("a job id")
}

// ----- scenarios -----

fn json_and_text_read_the_same_jobs_and_nodes(bed: &mut Testbed) {
    let r = release();
    println!("release {r}: read as {:?}", r.read_form());
    // A mix of states: running (with GPUs on two types of one node), held, completed.
    let running = plain(bed, &["-w", "n4", "--gres=gpu:2", "--wrap", "sleep 60"]);
    let held = plain(bed, &["-H", "--gres=gpu:k80:1", "--wrap", "true"]);
    let done = plain(bed, &["--gres=gpu:1", "--wrap", "true"]);
    // A held job with a deadline two hours out, a license and --no-requeue: both readers
    // must see all three.
    let submitted_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let bounded = plain(
        bed,
        &[
            "-H",
            "--deadline=now+2hours",
            "--licenses=matlab:1",
            "--no-requeue",
            "--gres=gpu:1",
            "--wrap",
            "true",
        ],
    );
    wait_state(bed, running, &["RUNNING"], 30);
    wait_state(bed, done, &["COMPLETED"], 30);
    scontrol(
        bed,
        &[
            "update",
            &format!("JobId={held}"),
            "Comment=line one\nJobId=999 JobState=RUNNING",
        ],
    );

    let text = scontrol(bed, &["-d", "show", "job"]);
    let (from_text, refused) = job::parse_jobs(&text);
    // In text, the comment's second line reads as a record of its own (a phantom job 999)
    // or makes the held job's record ambiguous: the adapter must cross-check it with squeue.
    let fooled = from_text.iter().any(|j| j.id == 999)
        || refused.iter().any(|(id, _)| *id == held.to_string());
    assert!(fooled, "{refused:?}");
    let from_text: Vec<_> = from_text
        .into_iter()
        .filter(|j| j.id != 999 && j.id != u64::from(held))
        .collect();
    let bounded_text = from_text
        .iter()
        .find(|j| j.id == u64::from(bounded))
        .expect("the job with a deadline and a license");
    let deadline = bounded_text.site.deadline.expect("its deadline");
    assert!(
        (submitted_at + 7_000..=submitted_at + 7_300).contains(&deadline),
        "deadline {deadline} for a job submitted at {submitted_at} with now+2hours"
    );
    assert!(
        bounded_text
            .site
            .licenses
            .as_deref()
            .is_some_and(|l| l.contains("matlab")),
        "{:?}",
        bounded_text.site.licenses
    );
    // The test cluster keeps Slurm's JobRequeue=1: a job is requeueable unless it says not.
    assert_eq!(bounded_text.site.requeue, Some(false));
    let running_text = from_text.iter().find(|j| j.id == u64::from(running));
    assert_eq!(running_text.and_then(|j| j.site.requeue), Some(true));
    let config = hadar_slurm::site::parse_config(&scontrol(bed, &["show", "config"])).unwrap();
    assert!(config.job_requeue, "JobRequeue as read: {config:?}");
    let nodes_text = scontrol(bed, &["show", "node"]);
    if r.read_form() == ReadForm::Text {
        println!(
            "release {r}: no JSON form read; the text form gave {} jobs",
            from_text.len()
        );
        return;
    }
    let json_text = scontrol(bed, &["-d", "show", "job", "--json"]);
    let from_json = json::parse_jobs(&json_text).unwrap_or_else(|e| panic!("{e}"));
    // JSON keeps the job whose comment imitates a record; the text form had to refuse it.
    let held_json = from_json
        .iter()
        .find(|j| j.id == u64::from(held))
        .expect("held job");
    assert_eq!(
        held_json.comment.as_deref(),
        Some("line one\nJobId=999 JobState=RUNNING")
    );
    assert!(from_json.iter().all(|j| j.id != 999));
    for t in &from_text {
        let j = from_json
            .iter()
            .find(|j| j.id == t.id)
            .expect("the same jobs");
        // A running job's end time is Slurm's projection (its start plus a year when it has
        // no limit), which 24.11 showed in the JSON read but not yet in the text one read a
        // moment earlier, just after the job started (CI, 2026-12-07). hadar reads a job's end
        // time only once it has ended.
        let projected = |mut job: hadar_slurm::SlurmJob| {
            if job.status == hadar_slurm::JobStatus::Running {
                job.end_time = None;
            }
            job
        };
        assert_eq!(
            projected(j.clone()),
            projected(t.clone()),
            "job {} differs between JSON and text",
            t.id
        );
    }
    let run = from_json
        .iter()
        .find(|j| j.id == u64::from(running))
        .unwrap();
    assert_eq!(
        run.gpu_parts().iter().map(|p| p.2).sum::<u32>(),
        2,
        "{run:?}"
    );
    let nodes_json = scontrol(bed, &["show", "node", "--json"]);
    assert_eq!(
        json::parse_nodes(&nodes_json).unwrap(),
        node::parse_nodes(&nodes_text).unwrap()
    );
    // Fixtures for hadar-slurm's unit tests, when asked (the text with the forged comment
    // left out, so that both forms hold the same jobs).
    if let Some(dir) = std::env::var_os("HADAR_SLURM_FIXTURES") {
        scontrol(bed, &["update", &format!("JobId={held}"), "Comment=plain"]);
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let files = [
            ("jobs.txt", scontrol(bed, &["-d", "show", "job"])),
            ("jobs.json", scontrol(bed, &["-d", "show", "job", "--json"])),
            ("nodes.txt", nodes_text),
            ("nodes.json", nodes_json),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }
    println!(
        "release {r}: {} jobs read alike from JSON and text; the forged comment is one field in JSON",
        from_text.len()
    );
}

fn a_held_jobs_nodes_and_gpu_count_can_be_updated(bed: &mut Testbed) {
    let id = plain(bed, &["-H", "--gres=gpu:1", "--wrap", "sleep 2"]);
    scontrol(
        bed,
        &[
            "update",
            &format!("JobId={id}"),
            "ReqNodeList=n2",
            "NumNodes=1-1",
            "Gres=gpu:2",
        ],
    );
    scontrol(bed, &["release", &id.to_string()]);
    wait_state(bed, id, &["RUNNING", "COMPLETED"], 30);
    let alloc = allocation(bed, id);
    let info = wait_state(bed, id, &["COMPLETED"], 30);
    assert_eq!(info.field("NodeList").as_deref(), Some("n2"), "{}", info.0);
    if !alloc.is_empty() {
        assert_eq!(alloc, vec![("n2".to_string(), "p100".to_string(), 2)]);
    }
    println!(
        "release {}: held job moved to n2 with 2 GPUs, released, ran: {alloc:?}",
        release()
    );
}

fn a_held_jobs_gpu_types_change_as_the_release_allows(bed: &mut Testbed) {
    let r = release();
    let id = plain(bed, &["-H", "--gres=gpu:k80:2", "--wrap", "sleep 1"]);
    scontrol(
        bed,
        &[
            "update",
            &format!("JobId={id}"),
            "ReqNodeList=n1",
            "Gres=gpu:v100:2",
        ],
    );
    let tres = bed
        .job(id)
        .unwrap()
        .gres_field("TresPerNode")
        .unwrap_or_default();
    println!("release {r}: k80:2 updated to v100:2 leaves TresPerNode={tres}");
    scontrol(bed, &["release", &id.to_string()]);
    if r.retypes_pending_jobs() {
        assert_eq!(tres, "gres/gpu:v100:2");
        let info = wait_state(bed, id, &["COMPLETED"], 30);
        assert_eq!(info.field("NodeList").as_deref(), Some("n1"), "{}", info.0);
    } else {
        // 22.05 shows only the new type but still wants the K80s too: on n1 (V100s only)
        // the job never starts, whatever TresPerNode says.
        std::thread::sleep(std::time::Duration::from_secs(8));
        let info = bed.job(id).unwrap();
        println!(
            "release {r}: released on n1 it stays {} (Reason={})",
            info.field("JobState").unwrap_or_default(),
            info.field("Reason").unwrap_or_default()
        );
        assert_eq!(
            info.field("JobState").as_deref(),
            Some("PENDING"),
            "{}",
            info.0
        );
        scontrol(bed, &["update", &format!("JobId={id}"), "ReqNodeList=n4"]);
        let ran = wait_state(bed, id, &["RUNNING", "COMPLETED"], 30);
        let alloc = allocation(bed, id);
        println!("release {r}: moved to n4 (both types) it runs with {alloc:?}");
        assert!(
            alloc.is_empty() || alloc.iter().any(|p| p.1 == "k80"),
            "{alloc:?} {}",
            ran.0
        );
        wait_state(bed, id, &["COMPLETED"], 30);
    }

    // Typeless to typed.
    let id = plain(bed, &["-H", "--gres=gpu:1", "--wrap", "true"]);
    let out = bed
        .command("scontrol")
        .args(["update", &format!("JobId={id}"), "Gres=gpu:p100:1"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let tres = bed
        .job(id)
        .unwrap()
        .gres_field("TresPerNode")
        .unwrap_or_default();
    println!(
        "release {r}: typeless gpu:1 updated to p100:1: {} (TresPerNode={tres}) {said}",
        if out.status.success() {
            "accepted"
        } else {
            "refused"
        }
    );
    if r.retypes_pending_jobs() {
        assert!(out.status.success(), "{said}");
        assert_eq!(tres, "gres/gpu:p100:1");
    } else {
        assert!(
            !out.status.success() || tres == "gres/gpu:1",
            "{said} {tres}"
        );
    }

    // Two types in one job on one node.
    let sub = bed.sbatch(
        &[
            "-p",
            "cpu",
            "-o",
            "/dev/null",
            "-w",
            "n4",
            "--gpus=v100:1,k80:1",
            "--wrap",
            "sleep 2",
        ],
        None,
    );
    match sub.job_id {
        Some(id) if sub.ok => {
            wait_state(bed, id, &["RUNNING", "COMPLETED"], 30);
            let alloc = allocation(bed, id);
            println!("release {r}: --gpus=v100:1,k80:1 on n4 runs with {alloc:?}");
            if r.retypes_pending_jobs() {
                let mut types: Vec<&str> = alloc.iter().map(|p| p.1.as_str()).collect();
                types.sort();
                assert_eq!(types, ["k80", "v100"], "{alloc:?}");
            }
            wait_state(bed, id, &["COMPLETED"], 30);
        }
        _ => {
            println!(
                "release {r}: --gpus=v100:1,k80:1 on n4 refused: {}",
                sub.stderr.trim()
            );
            assert!(!r.retypes_pending_jobs(), "{}", sub.stderr);
        }
    }
}

fn a_requeued_held_job_runs_again_when_released(bed: &mut Testbed) {
    let id = plain(bed, &["--gres=gpu:1", "--wrap", "sleep 60"]);
    wait_state(bed, id, &["RUNNING"], 30);
    scontrol(bed, &["requeuehold", &id.to_string()]);
    let info = wait_state(bed, id, &["PENDING"], 60);
    // Held: priority 0 (22.05 says Reason=JobHeldAdmin, 26.05 job_requeued_in_held_state).
    let reason = info.field("Reason").unwrap_or_default();
    assert_eq!(info.field("Priority").as_deref(), Some("0"), "{}", info.0);
    assert_eq!(info.field("Restarts").as_deref(), Some("1"), "{}", info.0);
    // A requeued job waits for its begin time; the daemon moves it to now.
    std::thread::sleep(std::time::Duration::from_secs(3));
    scontrol(bed, &["release", &id.to_string()]);
    scontrol(bed, &["update", &format!("JobId={id}"), "StartTime=now"]);
    let again = wait_state(bed, id, &["RUNNING"], 60);
    println!(
        "release {}: requeuehold left Reason={reason} Restarts=1; released, it ran again on {}",
        release(),
        again.field("NodeList").unwrap_or_default()
    );
}

/// Why the daemon's requeues say `Incomplete`: a job that ends between a round's read and
/// its requeue would otherwise be requeued from `COMPLETED` and run a second time.
fn an_ended_job_is_requeued_unless_incomplete_is_given(bed: &mut Testbed) {
    let ended = |bed: &Testbed| {
        let id = plain(bed, &["--wrap", "true"]);
        assert_completed(&wait_state(bed, id, &["COMPLETED"], 60));
        id
    };
    let guarded = ended(bed);
    scontrol(bed, &["requeuehold", "Incomplete", &guarded.to_string()]);
    let bare = ended(bed);
    scontrol(bed, &["requeuehold", &bare.to_string()]);
    let again = wait_state(bed, bare, &["PENDING"], 60);
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_completed(&wait_state(bed, guarded, &["COMPLETED"], 5));
    println!(
        "release {}: requeuehold of a COMPLETED job: {} (Restarts={}); with Incomplete: left COMPLETED",
        release(),
        again.field("JobState").unwrap_or_default(),
        again.field("Restarts").unwrap_or_default()
    );
}

fn a_heterogeneous_job_starts_and_names_its_scheduler(bed: &mut Testbed) {
    let id = plain(
        bed,
        &[
            "-w",
            "n1",
            "--gres=gpu:v100:1",
            "--wrap",
            "sleep 1",
            ":",
            "-p",
            "cpu",
            "-w",
            "n3",
            "--gres=gpu:k80:1",
        ],
    );
    let started = wait_state(bed, id, &["RUNNING", "COMPLETED"], 60);
    let scheduler = started
        .field("Scheduler")
        .unwrap_or_else(|| "not shown".into());
    let info = wait_state(bed, id, &["COMPLETED"], 60);
    assert_eq!(info.field("NodeList").as_deref(), Some("n1"), "{}", info.0);
    println!(
        "release {}: a two-component het job ran; Scheduler={scheduler}",
        release()
    );
}

fn a_job_submitted_for_a_user_runs_as_that_user_and_reports_by_comment(bed: &mut Testbed) {
    // Through the adapter's own `sbatch --uid --gid` (as the daemon submits copy jobs).
    let script = "#!/bin/sh\n#SBATCH -p cpu -o /dev/null --export=ALL\nscontrol update JobId=$SLURM_JOB_ID Comment=progress-42\nid -u\n";
    let path = bed.path("jobs/as-nobody.sh");
    std::fs::write(&path, script).unwrap();
    let slurm = hadar_slurm::Slurm::new(hadar_slurm::SlurmConfig {
        conf: Some(bed.path("etc/slurm.conf")),
        ..Default::default()
    });
    let id = slurm
        .submit_as(65534, 65534, &path, std::path::Path::new("/tmp"))
        .unwrap_or_else(|e| panic!("{e}")) as u32;
    let info = wait_state(bed, id, &["COMPLETED", "FAILED"], 30);
    assert_completed(&info);
    assert!(
        info.field("UserId")
            .unwrap_or_default()
            .ends_with("(65534)"),
        "{}",
        info.0
    );
    assert_eq!(
        info.field("Comment").as_deref(),
        Some("progress-42"),
        "{}",
        info.0
    );
    let written = scontrol(bed, &["write", "batch_script", &id.to_string(), "-"]);
    assert_eq!(written, script);
    println!(
        "release {}: sbatch --uid/--gid ran as uid 65534, its own scontrol update set the comment, write batch_script gave the script back",
        release()
    );
}

fn a_daemon_outside_utc_records_times_by_the_wall_clock(bed: &mut Testbed) {
    assert_eq!(bed.time_zone(), Some(ZONE));
    let serve = Serve::start_with(bed, "zone", &[("TZ", ZONE)]);
    let state = serve.state.clone();
    let steps = 3000;
    let submitted = now();
    let id = submit(
        bed,
        &["--gpus=1", &output_args(bed)],
        &script("resnet18-b64", steps, ""),
    );
    wait_state(bed, id, &["RUNNING", "COMPLETED"], 60);
    let seen_running = now();
    wait_state(bed, id, &["COMPLETED"], 120);
    let seen_done = now();
    // The daemon notices the end at its next round.
    wait_until("the daemon records the job finished", 30, || {
        let v: serde_json::Value =
            serde_json::from_str(&serve.hadar(&["explain", &id.to_string(), "--format", "json"]))
                .unwrap();
        !v["job"]["finished_s"].is_null()
    });
    drop(serve);
    let mut store = hadar_store::Store::open(&state).unwrap();
    let epoch = store.epoch(0.0).unwrap();
    let row = store
        .jobs()
        .unwrap()
        .into_iter()
        .find(|j| j.id == u64::from(id))
        .unwrap();
    let arrival = epoch + row.arrival_s;
    let start = epoch + row.first_start_s.expect("a start time");
    let end = epoch + row.finished_s.expect("an end time");
    println!(
        "release {}: in {ZONE}, submitted at {submitted:.0}, daemon saw arrival {arrival:.0}, start {start:.0} (running seen {seen_running:.0}), end {end:.0} (done seen {seen_done:.0}), run {:.1} s",
        release(),
        row.run_s
    );
    // Slurm keeps whole seconds; the daemon's rounds are 2 s apart.
    assert!(
        (arrival - submitted).abs() <= 3.0,
        "arrival {arrival} vs {submitted}"
    );
    assert!(
        start >= submitted - 2.0 && start <= seen_running + 2.0,
        "start {start}"
    );
    assert!(
        end >= start && end <= seen_done + 3.0,
        "end {end} vs {seen_done}"
    );
    assert!(
        row.run_s > 0.0 && row.run_s <= (end - start) + 4.0,
        "run {}",
        row.run_s
    );
    let learned = store.learned_rates(u64::from(id)).unwrap();
    let printed = printed_rates(&output(bed, id));
    println!("learned {learned:?}; emulate printed {printed:?}");
    if let (Some(l), Some(p)) = (learned.first(), printed.last()) {
        assert!(
            (l.rate / p - 1.0).abs() < 0.25,
            "learned {} vs printed {p}",
            l.rate
        );
    }
}
