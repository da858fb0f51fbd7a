//! The job shapes a site's users submit, under `hadar serve` on the real Slurm test cluster
//! with accounting (slurmdbd, `Options.accounting`): `--gpus-per-task` with `--ntasks` (one
//! `srun` task per GPU), a job its user submitted held, a dependent job, why a job waits as
//! `squeue` shows it, a job array (refused with one line; left to Slurm with `#HADAR off`),
//! a managed job billed to its account and QOS, `--cpus-per-gpu`/`--mem-per-gpu` given
//! back with the placement, jobs that chose their nodes run where their users said (a
//! partition of some of the nodes, `--exclude` and a `--constraint` hadar reads honoured by
//! the daemon, also when set after submission; `--nodelist` and other constraints left to
//! Slurm), jobs with a `--deadline`, `--licenses` or `--no-requeue` left to Slurm (licenses
//! added to a managed job after submission are waited for; a running managed job made
//! non-requeueable is never moved), a job placed only where its CPUs are free (CPU jobs
//! share the GPU nodes), and a job waiting while its partition is DOWN. One cluster for the
//! whole file; each scenario starts its own daemon. `harness = false`: arguments are name
//! filters.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Scenario, Testbed, run_scenarios, slurm_series};
use serve::*;
use std::path::PathBuf;
use std::process::ExitCode;

const SCENARIOS: &[Scenario] = &[
    (
        "gpus_per_task_job_runs_one_srun_task_per_gpu",
        gpus_per_task_job_runs_one_srun_task_per_gpu,
    ),
    (
        "a_job_its_user_held_is_left_alone_until_released",
        a_job_its_user_held_is_left_alone_until_released,
    ),
    (
        "a_dependent_job_is_not_planned_before_its_dependency_completes",
        a_dependent_job_is_not_planned_before_its_dependency_completes,
    ),
    (
        "squeue_shows_why_a_managed_job_waits",
        squeue_shows_why_a_managed_job_waits,
    ),
    (
        "an_array_of_eight_managed_elements_completes_two_at_a_time",
        an_array_of_eight_managed_elements_completes_two_at_a_time,
    ),
    (
        "an_exclusive_job_is_placed_on_a_node_of_its_own",
        an_exclusive_job_is_placed_on_a_node_of_its_own,
    ),
    (
        "an_opted_out_array_runs_under_slurm_alone",
        an_opted_out_array_runs_under_slurm_alone,
    ),
    (
        "a_managed_job_is_billed_to_its_account_and_qos",
        a_managed_job_is_billed_to_its_account_and_qos,
    ),
    (
        "cpus_and_memory_per_gpu_come_with_the_placement",
        cpus_and_memory_per_gpu_come_with_the_placement,
    ),
    (
        "a_job_that_chose_its_nodes_runs_where_its_user_said",
        a_job_that_chose_its_nodes_runs_where_its_user_said,
    ),
    (
        "a_job_with_a_deadline_licenses_or_no_requeue_is_left_to_slurm",
        a_job_with_a_deadline_licenses_or_no_requeue_is_left_to_slurm,
    ),
    (
        "licenses_added_to_a_managed_job_are_waited_for",
        licenses_added_to_a_managed_job_are_waited_for,
    ),
    (
        "a_running_job_made_non_requeueable_is_never_moved",
        a_running_job_made_non_requeueable_is_never_moved,
    ),
    (
        "a_job_runs_only_on_its_partitions_nodes",
        a_job_runs_only_on_its_partitions_nodes,
    ),
    (
        "a_job_is_placed_where_its_cpus_are_free",
        a_job_is_placed_where_its_cpus_are_free,
    ),
    (
        "a_job_waits_while_its_partition_starts_no_jobs",
        a_job_waits_while_its_partition_starts_no_jobs,
    ),
];

fn main() -> ExitCode {
    let mut options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("site-jobs-testbed"));
    options.accounting = true;
    run_scenarios(SCENARIOS, options, wait_queue_empty)
}

/// A managed batch script that runs `body` (hadar is told it is short).
fn short_job(body: &str) -> String {
    format!("#!/bin/sh\n#HADAR type=resnet50-b64 steps=10\n{body}\n")
}

fn field(bed: &Testbed, id: u32, key: &str) -> String {
    bed.job(id)
        .ok()
        .and_then(|j| j.field(key))
        .unwrap_or_default()
}

// ----- scenarios -----

fn gpus_per_task_job_runs_one_srun_task_per_gpu(bed: &mut Testbed) {
    let _serve = Serve::start(bed, "per-task");
    let out = output_args(bed);
    let id = submit(
        bed,
        &["-p", "gpu", "--ntasks=2", "--gpus-per-task=1", &out],
        &short_job(
            "srun --gpus-per-task=1 sh -c 'echo \"task $SLURM_PROCID gpus ${CUDA_VISIBLE_DEVICES:-none}\"'",
        ),
    );
    let record = field(bed, id, "AdminComment");
    assert!(
        record.contains("gpus=2") && record.contains("tasks=2 gpus-per-task=1"),
        "{record}"
    );
    let info = wait_completed(bed, id, 90);
    assert_eq!(info.field("NumTasks").as_deref(), Some("2"), "{}", info.0);
    let text = output(bed, id);
    let tasks: Vec<&str> = text.lines().filter(|l| l.starts_with("task ")).collect();
    println!("gpus-per-task output: {tasks:?}");
    assert_eq!(tasks.len(), 2, "{text}");
    for t in &tasks {
        let gpus = t.rsplit(' ').next().unwrap_or("");
        assert!(
            gpus != "none" && !gpus.contains(','),
            "one GPU per task: {text}"
        );
    }
}

fn a_job_its_user_held_is_left_alone_until_released(bed: &mut Testbed) {
    let serve = Serve::start(bed, "user-hold");
    let id = submit(
        bed,
        &["-p", "gpu", "--gpus=1", "--hold"],
        &short_job("true"),
    );
    assert!(field(bed, id, "AdminComment").contains("hold=user"));
    // The daemon has seen it (it says why it waits) and has not placed it.
    wait_until("the daemon notes the user's hold", 60, || {
        squeue_comment(bed, id).contains("held by its user")
    });
    serve.wait_rounds(bed, 3);
    assert_eq!(field(bed, id, "JobState"), "PENDING");
    assert_eq!(field(bed, id, "Reason"), "JobHeldUser");
    assert_eq!(field(bed, id, "ReqNodeList"), "(null)");
    bed.client("scontrol", &["release", &id.to_string()])
        .expect("release");
    wait_completed(bed, id, 90);
}

/// A job with `--dependency=afterok:` is not planned while the job it waits for runs, and
/// is planned as soon as that job has completed.
fn a_dependent_job_is_not_planned_before_its_dependency_completes(bed: &mut Testbed) {
    let _serve = Serve::start(bed, "dependency");
    let first = submit(bed, &["-p", "gpu", "--gpus=1"], &short_job("sleep 8"));
    let dep = format!("--dependency=afterok:{first}");
    let second = submit(bed, &["-p", "gpu", "--gpus=1", &dep], &short_job("true"));
    wait_state(bed, first, &["RUNNING"], 60);
    wait_until("the daemon notes the dependency", 30, || {
        squeue_comment(bed, second).contains("waiting for its dependency")
    });
    assert_eq!(field(bed, second, "JobState"), "PENDING");
    assert_eq!(field(bed, second, "ReqNodeList"), "(null)");
    wait_completed(bed, first, 90);
    let first_done = std::time::Instant::now();
    let info = wait_completed(bed, second, 90);
    // slurmctld tests a held job's dependency only in its purge pass, once a minute; the
    // daemon reads the dependency as met itself and places the job within a few rounds.
    let after = first_done.elapsed();
    assert!(
        after < std::time::Duration::from_secs(15),
        "the dependent job completed {after:?} after its dependency"
    );
    // It started after its dependency ended.
    let ended = field(bed, first, "EndTime");
    let started = info.field("StartTime").unwrap_or_default();
    assert!(
        started >= ended,
        "started {started}, dependency ended {ended}"
    );
}

fn squeue_shows_why_a_managed_job_waits(bed: &mut Testbed) {
    let fillers = occupy(bed, &[("n1", "gpu:v100:4"), ("n4", "gpu:v100:2")]);
    let _serve = Serve::start(bed, "reason");
    let id = submit(
        bed,
        &["-p", "gpu", "--gpus=2"],
        &short_job("#HADAR gpu-types=v100\ntrue"),
    );
    wait_until("squeue shows why the job waits", 60, || {
        squeue_comment(bed, id) == "hadar: waiting for 2 GPUs of v100 (queue position 1)"
    });
    println!("squeue %k: {}", squeue_comment(bed, id));
    for f in fillers {
        bed.client("scancel", &[&f.to_string()]).expect("scancel");
    }
    wait_completed(bed, id, 90);
}

/// `sacct`'s `JobID|State|AllocTRES` rows of array `id`'s elements.
fn array_rows(bed: &Testbed, id: u32) -> Vec<String> {
    bed.sacct_job(id, "JobID,State,AllocTRES")
        .lines()
        .map(str::to_string)
        .collect()
}

fn an_array_of_eight_managed_elements_completes_two_at_a_time(bed: &mut Testbed) {
    let serve = Serve::start(bed, "array");
    let id = submit(
        bed,
        &["-p", "gpu", "--gpus=1", "--array=0-7%2"],
        &short_job("sleep 3"),
    );
    let record = field(bed, id, "AdminComment");
    assert!(record.contains("array=yes array-throttle=2"), "{record}");
    let (mut most, mut samples) = (0, 0);
    let mut rows = Vec::new();
    wait_until("the array's 8 elements complete", 240, || {
        let running = bed
            .client(
                "squeue",
                &[
                    "-h",
                    "-r",
                    "-j",
                    &id.to_string(),
                    "-t",
                    "RUNNING",
                    "-o",
                    "%i",
                ],
            )
            .unwrap_or_default();
        most = most.max(running.lines().count());
        samples += 1;
        rows = array_rows(bed, id);
        rows.len() == 8 && rows.iter().all(|l| l.contains("|COMPLETED|"))
    });
    println!("array: at most {most} elements running in {samples} samples; sacct: {rows:?}");
    assert!((1..=2).contains(&most), "{most} elements ran at once");
    // Each element had the GPU the plugin stripped given back by hadar's placement.
    assert!(rows.iter().all(|l| l.contains("gres/gpu=1")), "{rows:?}");
    for task in 0..8 {
        let name = format!("{id}_{task}");
        let v: serde_json::Value =
            serde_json::from_str(&serve.hadar(&["explain", &name, "--format", "json"]))
                .expect("explain json");
        assert_eq!(v["job"]["array_task"], name.as_str(), "{v}");
        assert!(
            v["job"]["starts"].as_u64() >= Some(1),
            "{name} not placed by hadar: {v}"
        );
    }
}

fn an_exclusive_job_is_placed_on_a_node_of_its_own(bed: &mut Testbed) {
    // n1 keeps one v100 free beside a job hadar does not manage; n4 has 2 v100 and 2 k80.
    let fillers = occupy(bed, &[("n1", "gpu:v100:3")]);
    let _serve = Serve::start(bed, "exclusive");
    let v100 = short_job("#HADAR gpu-types=v100\nsleep 20");
    let whole = submit(bed, &["-p", "gpu", "--gpus=1", "--exclusive"], &v100);
    assert!(field(bed, whole, "AdminComment").contains("exclusive=yes"));
    let info = wait_state(bed, whole, &["RUNNING"], 60);
    println!("exclusive job: {}", info.0.replace('\n', " "));
    assert_eq!(info.field("NodeList").as_deref(), Some("n4"), "{}", info.0);
    assert_eq!(
        info.field("OverSubscribe").as_deref(),
        Some("NO"),
        "{}",
        info.0
    );
    // A job placed meanwhile goes to n1's free v100, not to n4's, which is the whole job's.
    let other = submit(
        bed,
        &["-p", "gpu", "--gpus=1"],
        &short_job("#HADAR gpu-types=v100\nsleep 1"),
    );
    let done = wait_completed(bed, other, 60);
    assert_eq!(done.field("NodeList").as_deref(), Some("n1"), "{}", done.0);
    assert_eq!(field(bed, whole, "JobState"), "RUNNING");
    wait_completed(bed, whole, 60);
    for f in fillers {
        bed.client("scancel", &[&f.to_string()]).expect("scancel");
    }
}

fn an_opted_out_array_runs_under_slurm_alone(bed: &mut Testbed) {
    // An array opted out runs under Slurm alone, each element with its GPU.
    let out = output_args(bed);
    let id = submit(
        bed,
        &["-p", "gpu", "--gres=gpu:1", "--array=0-3", &out],
        "#!/bin/sh\n#HADAR off\ntrue\n",
    );
    wait_until("the array's elements complete", 90, || {
        let text = bed.sacct_job(id, "State,AllocTRES");
        text.lines().count() == 4
            && text
                .lines()
                .all(|l| l.starts_with("COMPLETED|") && l.contains("gres/gpu=1"))
    });
}

fn a_managed_job_is_billed_to_its_account_and_qos(bed: &mut Testbed) {
    let _serve = Serve::start(bed, "billed");
    for args in [
        vec!["add", "qos", "siteq"],
        vec!["add", "account", "siteacct"],
        vec![
            "add",
            "user",
            "root",
            "account=siteacct",
            "qos=normal,siteq",
        ],
    ] {
        bed.sacctmgr(&args)
            .unwrap_or_else(|e| panic!("sacctmgr {args:?}: {e}"));
    }
    wait_until("slurmctld knows root in siteacct", 30, || {
        bed.sshare(&[
            "-n",
            "-P",
            "-A",
            "siteacct",
            "-u",
            "root",
            "-o",
            "Account,User",
        ])
        .is_ok_and(|o| o.lines().any(|l| l.trim() == "siteacct|root"))
    });
    let id = submit(
        bed,
        &["-p", "gpu", "--gpus=2", "--account=siteacct", "--qos=siteq"],
        &short_job("sleep 2"),
    );
    wait_completed(bed, id, 90);
    let mut record = String::new();
    wait_until("sacct has the job's record", 30, || {
        record = bed.sacct_job(id, "Account,QOS,State,AllocTRES");
        record.contains("COMPLETED")
    });
    println!("sacct: {}", record.trim());
    assert!(record.starts_with("siteacct|siteq|COMPLETED|"), "{record}");
    assert!(record.contains("gres/gpu=2"), "{record}");
}

fn cpus_and_memory_per_gpu_come_with_the_placement(bed: &mut Testbed) {
    let _serve = Serve::start(bed, "per-gpu");
    let out = output_args(bed);
    let id = submit(
        bed,
        &[
            "-p",
            "gpu",
            "--gpus=2",
            "--cpus-per-gpu=2",
            "--mem-per-gpu=1000",
            &out,
        ],
        &short_job("echo \"cpus $SLURM_CPUS_ON_NODE\"; sleep 4"),
    );
    let record = field(bed, id, "AdminComment");
    // Before 24.11 Slurm would start the job with one CPU if the daemon gave its CPUs per
    // GPU back with a placement, so the plugin leaves it to Slurm: no record, and Slurm
    // gives it what it asked for (the assertions below hold either way).
    let old_slurm = slurm_series() < (24, 11);
    if old_slurm {
        assert!(!record.contains("hadar:"), "{record}");
    } else {
        assert!(
            record.contains("gpus=2") && record.contains("cpus-per-gpu=2 mem-per-gpu=1000"),
            "{record}"
        );
    }
    let info = wait_state(bed, id, &["RUNNING", "COMPLETED"], 60);
    let f = |k: &str| info.field(k).unwrap_or_default();
    println!(
        "job {id} placed: NumCPUs={} CpusPerTres={} MemPerTres={} MinMemoryTRES={} ReqTRES={} AllocTRES={}",
        f("NumCPUs"),
        f("CpusPerTres"),
        f("MemPerTres"),
        f("MinMemoryTRES"),
        f("ReqTRES"),
        f("AllocTRES"),
    );
    // 2 GPUs: 4 CPUs, and 1000 MB per GPU (memory is not consumable in the test cluster,
    // CR_Core, so AllocTRES shows none). 22.05 prints the allocation as TRES= and has no
    // MinMemoryTRES.
    let alloc = if old_slurm { f("TRES") } else { f("AllocTRES") };
    assert_eq!(f("NumCPUs"), "4", "{}", info.0);
    assert!(alloc.contains("cpu=4,"), "{}", info.0);
    assert!(f("CpusPerTres").ends_with("gpu:2"), "{}", info.0);
    assert!(f("MemPerTres").ends_with("gpu:1000"), "{}", info.0);
    if !old_slurm {
        assert_eq!(f("MinMemoryTRES"), "1000M", "{}", info.0);
    }
    wait_completed(bed, id, 90);
    assert!(output(bed, id).contains("cpus 4"), "{}", output(bed, id));
}

/// Jobs in the managed partition that chose their nodes run where their users said. An
/// `--exclude` list and a `--constraint` hadar reads keep the job managed: the daemon
/// offers it only the nodes they allow, also when the exclusion is set after submission.
/// A `--nodelist` and a constraint hadar does not read leave the job to Slurm (no hadar
/// record). Test nodes' features: n1 v100,nvlink; n2 p100; n3 k80; n4 v100,k80. Left to
/// itself hadar puts a one-GPU job on a V100 (n1 or n4), so each exclusion below matters.
fn a_job_that_chose_its_nodes_runs_where_its_user_said(bed: &mut Testbed) {
    let _serve = Serve::start(bed, "node-choice");
    let job = short_job("sleep 1");
    let excluded = submit(bed, &["-p", "gpu", "--gpus=1", "-x", "n1,n4"], &job);
    let constrained = submit(bed, &["-p", "gpu", "--gpus=1", "-C", "p100|k80"], &job);
    let nvlink = submit(bed, &["-p", "gpu", "--gpus=2", "-C", "nvlink"], &job);
    // Excluded after submission, while hadar holds it until its begin time.
    let later = submit(bed, &["-p", "gpu", "--gpus=1", "--begin=now+6"], &job);
    bed.client(
        "scontrol",
        &["update", &format!("JobId={later}"), "ExcNodeList=n1,n2,n4"],
    )
    .unwrap();
    let listed = submit(bed, &["-p", "gpu", "--gres=gpu:k80:1", "-w", "n3"], &job);
    let bracketed = submit(bed, &["-p", "gpu", "--gpus=1", "-C", "[p100|k80]"], &job);
    let expect: [(u32, &[&str], bool); 6] = [
        (excluded, &["n2", "n3"], true),
        (constrained, &["n2", "n3", "n4"], true),
        (nvlink, &["n1"], true),
        (later, &["n3"], true),
        (listed, &["n3"], false),
        (bracketed, &["n2", "n3", "n4"], false),
    ];
    for (id, allowed, managed) in expect {
        let info = wait_completed(bed, id, 90);
        let record = info.field("AdminComment");
        assert_eq!(
            record.as_deref().is_some_and(|r| r.starts_with("hadar")),
            managed,
            "job {id}: managed {managed} expected: {}",
            info.0
        );
        let node = info.field("NodeList").unwrap_or_default();
        assert!(
            allowed.contains(&node.as_str()),
            "job {id} ran on {node}, not on {allowed:?}: {}",
            info.0
        );
    }
}

/// A job with a `--deadline`, one with `--licenses`, and one that may not be requeued
/// (`--no-requeue`) are left to Slurm (no hadar record, logged): Slurm's own scheduler
/// tests the deadline (hadar holding the job would leave that test to slurmctld's purge
/// pass), hadar does not see licenses, and hadar preempts by requeueing. A managed job is
/// made requeueable, whatever the site's `JobRequeue`.
fn a_job_with_a_deadline_licenses_or_no_requeue_is_left_to_slurm(bed: &mut Testbed) {
    let _serve = Serve::start(bed, "deadline");
    let job = short_job("sleep 1");
    let deadline = submit(
        bed,
        &["-p", "gpu", "--gpus=1", "-t", "5", "--deadline=now+1hour"],
        &job,
    );
    let once = submit(bed, &["-p", "gpu", "--gpus=1", "--no-requeue"], &job);
    let licensed = submit(bed, &["-p", "gpu", "--gpus=1", "-L", "matlab:1"], &job);
    let managed = submit(bed, &["-p", "gpu", "--gpus=1"], &job);
    for id in [deadline, once, licensed] {
        let info = wait_completed(bed, id, 60);
        assert_eq!(info.field("AdminComment"), None, "{}", info.0);
    }
    let info = wait_completed(bed, managed, 60);
    assert!(info.field("AdminComment").is_some(), "{}", info.0);
    assert_eq!(info.field("Requeue").as_deref(), Some("1"), "{}", info.0);
    let log = bed.controller_log();
    for why in [
        "left to Slurm: it has a --deadline",
        "left to Slurm: it asked not to be requeued",
        "left to Slurm: it asks for licenses",
    ] {
        assert!(log.contains(why), "slurmctld's log says {why:?}");
    }
}

/// Licenses its user adds to a managed job after submission (`scontrol update
/// Licenses=`): while the cluster has none free, the daemon does not place the job, and
/// says why in its comment; once they are free it is placed and runs.
fn licenses_added_to_a_managed_job_are_waited_for(bed: &mut Testbed) {
    // Both of the test cluster's matlab licenses, held by a job left to Slurm.
    let holder = submit(
        bed,
        &["-p", "gpu", "--gpus=1", "-L", "matlab:2"],
        &short_job("sleep 300"),
    );
    wait_state(bed, holder, &["RUNNING"], 60);
    // A released job short of its licenses pends with the reason the daemon looks for when
    // one it released does (`eligible::pending_for_licenses`).
    let short = submit(
        bed,
        &["-p", "gpu", "--gpus=1", "-L", "matlab:1"],
        &short_job("true"),
    );
    wait_until("a job short of its licenses pends for them", 30, || {
        field(bed, short, "Reason") == "Licenses"
    });
    // Submitted while no daemon runs, so that the licenses are added before any round.
    let managed = submit(bed, &["-p", "gpu", "--gpus=1"], &short_job("true"));
    assert!(field(bed, managed, "AdminComment").contains("hadar:v1"));
    bed.client(
        "scontrol",
        &["update", &format!("JobId={managed}"), "Licenses=matlab:1"],
    )
    .expect("add a license to the held job");
    let serve = Serve::start(bed, "licenses");
    wait_until("the daemon says the job waits for its licenses", 60, || {
        squeue_comment(bed, managed) == "hadar: waiting for its licenses matlab:1"
    });
    serve.wait_rounds(bed, 2);
    assert_eq!(field(bed, managed, "JobState"), "PENDING");
    assert!(field(bed, managed, "Reason").starts_with("JobHeld"));
    assert_eq!(field(bed, managed, "ReqNodeList"), "(null)");
    // `hadar explain` gives the same reason as the comment, in words and in JSON.
    let words = serve.hadar(&["explain", &managed.to_string()]);
    assert!(
        words.contains("Slurm would not start it yet: waiting for its licenses matlab:1"),
        "{words}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&serve.hadar(&["explain", &managed.to_string(), "--format", "json"]))
            .expect("explain json");
    assert_eq!(
        v["decision"]["wait_reason"]["hold"]["licenses"], "matlab:1",
        "{v}"
    );
    bed.client("scancel", &[&holder.to_string()])
        .expect("end the license holder");
    let info = wait_completed(bed, managed, 90);
    assert!(
        info.field("Licenses").is_some_and(|l| l.contains("matlab")),
        "{}",
        info.0
    );
}

/// A running managed job its user makes non-requeueable (`scontrol update Requeue=0`) is
/// never preempted: slurmctld would refuse the requeue after the job had been signalled to
/// checkpoint. Draining its node, which makes the daemon move any other job, leaves it
/// running there.
fn a_running_job_made_non_requeueable_is_never_moved(bed: &mut Testbed) {
    let serve = Serve::start(bed, "requeue-later");
    let id = submit(bed, &["-p", "gpu", "--gpus=1"], &short_job("sleep 25"));
    let info = wait_state(bed, id, &["RUNNING"], 60);
    let node = info.field("NodeList").expect("a running job's node");
    bed.client("scontrol", &["update", &format!("JobId={id}"), "Requeue=0"])
        .expect("make the running job non-requeueable");
    assert_eq!(field(bed, id, "Requeue"), "0");
    drain(bed, &node);
    serve.wait_rounds(bed, 3);
    let (state, restarts) = (field(bed, id, "JobState"), field(bed, id, "Restarts"));
    let words = serve.hadar(&["explain", &id.to_string()]);
    resume(bed, &node);
    assert_eq!(
        (state.as_str(), restarts.as_str()),
        ("RUNNING", "0"),
        "{}",
        daemon_log(bed)
    );
    assert!(words.contains("Requeue=0"), "{words}");
    let info = wait_completed(bed, id, 60);
    assert_eq!(info.field("Restarts").as_deref(), Some("0"), "{}", info.0);
}

/// A managed job submitted to a partition of some of the nodes (`old`: n3 and n4) is placed
/// only on that partition's nodes: with theirs taken, it waits while n1 and n2 have GPUs
/// free, and it runs there once one frees up.
fn a_job_runs_only_on_its_partitions_nodes(bed: &mut Testbed) {
    let fillers = occupy(bed, &[("n3", "gpu:k80:4"), ("n4", "gpu:v100:2,gpu:k80:2")]);
    let serve = Serve::start(bed, "partition-nodes");
    let id = submit(bed, &["-p", "old", "--gpus=1"], &short_job("true"));
    serve.wait_rounds(bed, 3);
    let (state, asked) = (field(bed, id, "JobState"), field(bed, id, "ReqNodeList"));
    let words = serve.hadar(&["explain", &id.to_string()]);
    bed.client("scancel", &[&fillers[0].to_string()])
        .expect("free n3");
    assert_eq!(
        (state.as_str(), asked.as_str()),
        ("PENDING", "(null)"),
        "placed off its partition: {words}\n{}",
        daemon_log(bed)
    );
    assert!(
        words.contains("its --partition=old allows only n3,n4"),
        "{words}"
    );
    let info = wait_completed(bed, id, 60);
    assert_eq!(info.field("NodeList").as_deref(), Some("n3"), "{}", info.0);
    bed.client("scancel", &[&fillers[1].to_string()])
        .expect("free n4");
}

/// The GPU nodes are shared with a CPU partition (`cpu`: n1-n4, 8 CPUs each, `CR_Core`).
/// With every CPU of n1, n2 and n4 taken by CPU jobs, a managed GPU job is placed on n3,
/// the one node where it can start, although the V100s of n1 and n4 would be faster.
fn a_job_is_placed_where_its_cpus_are_free(bed: &mut Testbed) {
    let cpu_jobs: Vec<u32> = ["n1", "n2", "n4"]
        .iter()
        .map(|node| {
            submit(
                bed,
                &["-p", "cpu", "-w", node, "-n", "8", "--job-name=cpu-filler"],
                "#!/bin/sh\nsleep 600\n",
            )
        })
        .collect();
    for id in &cpu_jobs {
        wait_state(bed, *id, &["RUNNING"], 30);
    }
    let serve = Serve::start(bed, "cpus-free");
    let id = submit(bed, &["-p", "gpu", "--gpus=1"], &short_job("true"));
    let started = bed.wait_job(id, &["COMPLETED"], std::time::Duration::from_secs(40));
    let words = serve.hadar(&["explain", &id.to_string()]);
    let record = field(bed, id, "NodeList");
    for id in &cpu_jobs {
        bed.client("scancel", &[&id.to_string()])
            .expect("end a CPU job");
    }
    let info = started.unwrap_or_else(|e| panic!("{e}\n{words}\n{}", daemon_log(bed)));
    assert_eq!(record, "n3", "{words}\n{}", info.0);
}

/// An admin sets a partition DOWN (maintenance): Slurm queues its jobs but starts none. A
/// managed job in it is not placed (no GPUs are held for a job that cannot start), its
/// comment says why, and it runs once the partition is UP again.
fn a_job_waits_while_its_partition_starts_no_jobs(bed: &mut Testbed) {
    let set_old = |state: &str| {
        bed.client(
            "scontrol",
            &["update", "PartitionName=old", &format!("State={state}")],
        )
        .expect("set partition old's state")
    };
    set_old("DOWN");
    let serve = Serve::start(bed, "partition-down");
    let id = submit(bed, &["-p", "old", "--gpus=1"], &short_job("true"));
    let said = "hadar: waiting for its partition to start jobs again: old (DOWN)";
    // Polled here rather than with wait_until, so that the partition is UP again before any
    // assertion can fail and leave it DOWN for the next scenario.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut comment = squeue_comment(bed, id);
    while comment != said && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(500));
        comment = squeue_comment(bed, id);
    }
    if comment == said {
        serve.wait_rounds(bed, 2);
    }
    let (state, asked) = (field(bed, id, "JobState"), field(bed, id, "ReqNodeList"));
    set_old("UP");
    assert_eq!(comment, said, "{}", daemon_log(bed));
    assert_eq!((state.as_str(), asked.as_str()), ("PENDING", "(null)"));
    wait_completed(bed, id, 60);
}
