//! The job shapes a site's users submit, under `hadar serve` on the real Slurm test cluster
//! with accounting (slurmdbd, `Options.accounting`): `--gpus-per-task` with `--ntasks` (one
//! `srun` task per GPU), a job its user submitted held, a dependent job, why a job waits as
//! `squeue` shows it, a job array (refused with one line; left to Slurm with `#HADAR off`),
//! a managed job billed to its account and QOS, and `--cpus-per-gpu`/`--mem-per-gpu` given
//! back with the placement. One cluster for the whole file; each
//! scenario starts its own daemon. `harness = false`: arguments are name filters.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Scenario, Testbed, run_scenarios};
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
        "a_job_array_is_refused_in_one_line_and_runs_unmanaged",
        a_job_array_is_refused_in_one_line_and_runs_unmanaged,
    ),
    (
        "a_managed_job_is_billed_to_its_account_and_qos",
        a_managed_job_is_billed_to_its_account_and_qos,
    ),
    (
        "cpus_and_memory_per_gpu_come_with_the_placement",
        cpus_and_memory_per_gpu_come_with_the_placement,
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

/// `squeue`'s comment column (`%k`) for job `id`.
fn squeue_comment(bed: &Testbed, id: u32) -> String {
    bed.client("squeue", &["-h", "-j", &id.to_string(), "-o", "%k"])
        .unwrap_or_default()
        .trim()
        .to_string()
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
    let _serve = Serve::start(bed, "user-hold");
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
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert_eq!(field(bed, id, "JobState"), "PENDING");
    assert_eq!(field(bed, id, "Reason"), "JobHeldUser");
    assert_eq!(field(bed, id, "ReqNodeList"), "(null)");
    bed.client("scontrol", &["release", &id.to_string()])
        .expect("release");
    wait_completed(bed, id, 90);
}

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
    let info = wait_completed(bed, second, 90);
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

fn a_job_array_is_refused_in_one_line_and_runs_unmanaged(bed: &mut Testbed) {
    let sub = bed.sbatch(
        &["-p", "gpu", "--gres=gpu:1", "--array=0-3"],
        Some(&short_job("true")),
    );
    assert!(!sub.ok, "{}", sub.stdout);
    let message = sub.stderr.trim();
    println!("sbatch --array: {message}");
    // One line of hadar's (sbatch adds its own "Batch job submission failed" line).
    let ours: Vec<&str> = message.lines().filter(|l| l.contains("hadar:")).collect();
    assert_eq!(ours.len(), 1, "{message}");
    assert!(
        ours[0].contains("job arrays are not supported"),
        "{message}"
    );
    let sub = bed.sbatch(
        &["-p", "gpu", "--gres=gpu:1", "--exclusive"],
        Some(&short_job("true")),
    );
    assert!(
        !sub.ok && sub.stderr.contains("hadar: --exclusive is not supported"),
        "{}",
        sub.stderr
    );
    // The same array opted out runs under Slurm alone, each element with its GPU.
    let out = output_args(bed);
    let id = submit(
        bed,
        &["-p", "gpu", "--gres=gpu:1", "--array=0-3", &out],
        "#!/bin/sh\n#HADAR off\ntrue\n",
    );
    wait_until("the array's elements complete", 90, || {
        let text = bed
            .client(
                "sacct",
                &[
                    "-n",
                    "-X",
                    "-P",
                    "-j",
                    &id.to_string(),
                    "-o",
                    "State,AllocTRES",
                ],
            )
            .unwrap_or_default();
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
        record = bed
            .sacct(&[
                "-n",
                "-X",
                "-P",
                "-j",
                &id.to_string(),
                "-o",
                "Account,QOS,State,AllocTRES",
            ])
            .unwrap_or_default();
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
    assert!(
        record.contains("gpus=2") && record.contains("cpus-per-gpu=2 mem-per-gpu=1000"),
        "{record}"
    );
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
    // CR_Core, so AllocTRES shows none).
    assert_eq!(f("NumCPUs"), "4", "{}", info.0);
    assert!(f("AllocTRES").contains("cpu=4,"), "{}", info.0);
    assert!(f("CpusPerTres").ends_with("gpu:2"), "{}", info.0);
    assert!(f("MemPerTres").ends_with("gpu:1000"), "{}", info.0);
    assert_eq!(f("MinMemoryTRES"), "1000M", "{}", info.0);
    wait_completed(bed, id, 90);
    assert!(output(bed, id).contains("cpus 4"), "{}", output(bed, id));
}
