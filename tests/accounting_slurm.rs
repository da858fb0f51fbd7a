//! Accounting in the Slurm test cluster: slurmdbd on a private MariaDB, `priority/multifactor`
//! with fair-share, and associations, limits and QOS enforced (`Options.accounting`). Each
//! scenario creates its own accounts and QOS with `sacctmgr` and checks what a site's users
//! see: `sacct` records of a job's account, QOS and GPUs, `sshare` usage, a QOS GPU limit
//! keeping a job pending, an unknown account refused. Each prints what it saw, for the
//! "Accounting" section of `docs/SLURM-TESTBED.md`. `harness = false`: arguments are name
//! filters. No plugin: this is Slurm's own behaviour, which hadar must then respect.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Plugin, Scenario, Testbed, run_scenarios};
use serve::{wait_queue_empty, wait_state, wait_until};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const SCENARIOS: &[Scenario] = &[
    (
        "a_job_is_recorded_with_its_account_qos_and_gpus",
        a_job_is_recorded_with_its_account_qos_and_gpus,
    ),
    (
        "sshare_shows_the_usage_of_the_account_whose_job_ran",
        sshare_shows_the_usage_of_the_account_whose_job_ran,
    ),
    (
        "a_qos_gpu_limit_per_user_keeps_the_next_job_pending",
        a_qos_gpu_limit_per_user_keeps_the_next_job_pending,
    ),
    (
        "an_unknown_account_is_refused_at_submission",
        an_unknown_account_is_refused_at_submission,
    ),
];

fn main() -> ExitCode {
    let mut options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("accounting-testbed"));
    options.plugin = Plugin::None;
    options.accounting = true;
    run_scenarios(SCENARIOS, options, wait_queue_empty)
}

fn release() -> String {
    hadar_slurm_testbed::slurm_release().unwrap_or_else(|| "unknown".into())
}

fn sacctmgr(bed: &Testbed, args: &[&str]) {
    bed.sacctmgr(args)
        .unwrap_or_else(|e| panic!("sacctmgr {args:?}: {e}"));
}

/// Waits until slurmctld knows root's association with `account` (slurmdbd pushes
/// `sacctmgr`'s changes to slurmctld on its own time). sshare indents rows by depth.
fn wait_association(bed: &Testbed, account: &str) {
    wait_until(&format!("slurmctld knows account {account}"), 30, || {
        bed.sshare(&[
            "-n",
            "-P",
            "-A",
            account,
            "-u",
            "root",
            "-o",
            "Account,User",
        ])
        .is_ok_and(|out| out.lines().any(|l| l.trim() == format!("{account}|root")))
    });
}

/// An account with root as its user, allowed the QOS `qos` (besides `normal`).
fn account_for_root(bed: &Testbed, account: &str, qos: &[&str]) {
    sacctmgr(bed, &["add", "account", account, "fairshare=1"]);
    let mut list = vec!["normal"];
    list.extend_from_slice(qos);
    let qos_arg = format!("qos={}", list.join(","));
    sacctmgr(
        bed,
        &[
            "add",
            "user",
            "root",
            &format!("account={account}"),
            &qos_arg,
        ],
    );
    wait_association(bed, account);
}

fn submit(bed: &Testbed, args: &[&str]) -> u32 {
    let mut all = vec!["-p", "gpu", "-o", "/dev/null"];
    all.extend_from_slice(args);
    let sub = bed.sbatch(&all, None);
    assert!(sub.ok, "sbatch {all:?}: {}", sub.stderr);
    sub.job_id.expect("a job id")
}

/// `sacct` fields (`-X -P`) of job `id` once slurmdbd has its end (its record arrives
/// after the job ends, on slurmctld's next message to slurmdbd) and every field is known
/// (22.05 once showed a just-created QOS as `Unknown`). Returns every distinct record seen.
fn sacct_records(bed: &Testbed, id: u32, fields: &str) -> Vec<Vec<String>> {
    let mut seen: Vec<Vec<String>> = Vec::new();
    let args = ["-n", "-X", "-P", "-j", &id.to_string(), "-o", fields];
    wait_until(&format!("sacct records job {id} completed"), 30, || {
        let out = bed.sacct(&args).unwrap_or_default();
        let record: Vec<String> = out.trim().split('|').map(str::to_string).collect();
        let done = record.last().is_some_and(|s| s == "COMPLETED")
            && !record.iter().any(|f| f == "Unknown");
        if seen.last() != Some(&record) {
            seen.push(record);
        }
        done
    });
    seen
}

/// `sshare` rows of `accounts` (account rows and root's rows under them) as
/// `Account|User|RawUsage|FairShare`.
fn shares(bed: &Testbed, accounts: &str) -> Vec<Vec<String>> {
    let out = bed
        .sshare(&[
            "-n",
            "-P",
            "-a",
            "-A",
            accounts,
            "-o",
            "Account,User,RawUsage,FairShare",
        ])
        .unwrap_or_else(|e| panic!("sshare: {e}"));
    out.lines()
        .map(|l| l.split('|').map(|f| f.trim().to_string()).collect())
        .collect()
}

/// root's (RawUsage, FairShare) in `account`.
fn root_share(rows: &[Vec<String>], account: &str) -> (u64, f64) {
    let row = rows
        .iter()
        .find(|r| r[0] == account && r[1] == "root")
        .unwrap_or_else(|| panic!("no root row for {account}: {rows:?}"));
    (row[2].parse().unwrap(), row[3].parse().unwrap())
}

// ----- scenarios -----

fn a_job_is_recorded_with_its_account_qos_and_gpus(bed: &mut Testbed) {
    sacctmgr(bed, &["add", "qos", "rec_qos"]);
    account_for_root(bed, "rec_acct", &["rec_qos"]);
    let id = submit(
        bed,
        &[
            "-A",
            "rec_acct",
            "--qos=rec_qos",
            "--gres=gpu:v100:2",
            "--wrap",
            "sleep 1",
        ],
    );
    let info = wait_state(bed, id, &["COMPLETED"], 60);
    assert_eq!(
        info.field("Account").as_deref(),
        Some("rec_acct"),
        "{}",
        info.0
    );
    assert_eq!(info.field("QOS").as_deref(), Some("rec_qos"), "{}", info.0);
    let started = Instant::now();
    let records = sacct_records(bed, id, "Account,QOS,AllocTRES,State");
    println!(
        "release {}: sacct had job {id} {:.1} s after it completed: {records:?}",
        release(),
        started.elapsed().as_secs_f64()
    );
    let record = records.last().unwrap();
    assert_eq!(record[0], "rec_acct");
    assert_eq!(record[1], "rec_qos");
    let tres: Vec<&str> = record[2].split(',').collect();
    assert!(tres.contains(&"gres/gpu=2"), "{tres:?}");
    assert!(tres.contains(&"gres/gpu:v100=2"), "{tres:?}");
}

fn sshare_shows_the_usage_of_the_account_whose_job_ran(bed: &mut Testbed) {
    account_for_root(bed, "fs_busy", &[]);
    account_for_root(bed, "fs_idle", &[]);
    let before = shares(bed, "fs_busy,fs_idle");
    assert_eq!(root_share(&before, "fs_busy").0, 0, "{before:?}");
    let id = submit(bed, &["-A", "fs_busy", "--gres=gpu:4", "--wrap", "sleep 3"]);
    wait_state(bed, id, &["COMPLETED"], 60);
    // Usage is charged when the job ends.
    let rows = shares(bed, "fs_busy,fs_idle");
    let (busy_usage, _) = root_share(&rows, "fs_busy");
    let (idle_usage, _) = root_share(&rows, "fs_idle");
    println!(
        "release {}: sshare right after the job: {rows:?}",
        release()
    );
    // Billed in GPU-seconds (TRESBillingWeights=GRES/gpu=1): 4 GPUs for at least a second.
    assert!(busy_usage >= 4, "{rows:?}");
    assert_eq!(idle_usage, 0, "{rows:?}");
    // The fair-share factor follows at the next decay round (PriorityCalcPeriod, one minute
    // at least) or when slurmctld starts: restarted, it recomputes at once from the usage it
    // saved, which also shows that the usage outlives a restart.
    let started = Instant::now();
    bed.restart_controller().unwrap_or_else(|e| panic!("{e}"));
    let mut rows = Vec::new();
    wait_until("fs_busy's fair-share falls below fs_idle's", 30, || {
        rows = shares(bed, "fs_busy,fs_idle");
        root_share(&rows, "fs_busy").1 < root_share(&rows, "fs_idle").1
    });
    println!(
        "release {}: {:.0} s after restarting slurmctld the fair-share factors differ: {rows:?}",
        release(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(root_share(&rows, "fs_busy").0, busy_usage, "{rows:?}");
}

fn a_qos_gpu_limit_per_user_keeps_the_next_job_pending(bed: &mut Testbed) {
    sacctmgr(bed, &["add", "qos", "gpu2", "MaxTRESPerUser=gres/gpu=2"]);
    account_for_root(bed, "lim_acct", &["gpu2"]);
    let limited = ["-A", "lim_acct", "--qos=gpu2"];
    let first = submit(
        bed,
        &[&limited[..], &["--gres=gpu:2", "--wrap", "sleep 60"]].concat(),
    );
    wait_state(bed, first, &["RUNNING"], 30);
    let second = submit(
        bed,
        &[&limited[..], &["--gres=gpu:1", "--wrap", "sleep 1"]].concat(),
    );
    let mut info = bed.job(second).unwrap();
    wait_until("the second job gets a pending reason", 30, || {
        info = bed.job(second).unwrap();
        !matches!(info.field("Reason").as_deref(), Some("None") | None)
    });
    let reason = info.field("Reason").unwrap_or_default();
    println!(
        "release {}: with MaxTRESPerUser=gres/gpu=2 used up, the next job is {} Reason={reason}",
        release(),
        info.field("JobState").unwrap_or_default()
    );
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("PENDING"),
        "{}",
        info.0
    );
    assert_eq!(reason, "QOSMaxGRESPerUser", "{}", info.0);
    // The same job under the default QOS is not limited: the limit is the QOS's.
    let unlimited = submit(
        bed,
        &["-A", "lim_acct", "--gres=gpu:1", "--wrap", "sleep 1"],
    );
    wait_state(bed, unlimited, &["COMPLETED"], 30);
    bed.client("scancel", &[&first.to_string()]).unwrap();
    wait_state(bed, second, &["COMPLETED"], 30);
}

fn an_unknown_account_is_refused_at_submission(bed: &mut Testbed) {
    let sub = bed.sbatch(
        &[
            "-p",
            "gpu",
            "-o",
            "/dev/null",
            "-A",
            "no_such_account",
            "--wrap",
            "true",
        ],
        None,
    );
    println!(
        "release {}: sbatch -A no_such_account: {}",
        release(),
        sub.stderr.trim()
    );
    assert!(!sub.ok && sub.job_id.is_none(), "{sub:?}");
    assert!(sub.stderr.contains("Invalid account"), "{}", sub.stderr);
    // The account that exists for root (root's default) is accepted.
    let id = submit(bed, &["--wrap", "true"]);
    let info = wait_state(bed, id, &["COMPLETED"], 30);
    assert_eq!(info.field("Account").as_deref(), Some("root"), "{}", info.0);
}
