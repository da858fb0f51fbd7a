//! A site's own rules with `hadar serve` on the real test cluster with accounting (issue
//! #14): fair-share decides which account's job gets a contested GPU, a QOS's
//! `MaxTRESPerUser` keeps a user's fifth GPU out of the plan (and `explain` names it), and a
//! job whose time limit a slow type would exceed waits for a fast one and is not killed.
//! One cluster for all scenarios; each creates its own accounts and QOS with `sacctmgr`.
//! `harness = false`: arguments are name filters.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Scenario, Testbed, run_scenarios};
use serve::*;
use std::path::PathBuf;
use std::process::ExitCode;

const SCENARIOS: &[Scenario] = &[
    (
        "the_under_served_account_gets_the_contested_gpu",
        the_under_served_account_gets_the_contested_gpu,
    ),
    (
        "a_users_fifth_gpu_is_never_planned_under_max_tres_per_user",
        a_users_fifth_gpu_is_never_planned_under_max_tres_per_user,
    ),
    (
        "a_job_waits_for_a_type_that_finishes_within_its_time_limit",
        a_job_waits_for_a_type_that_finishes_within_its_time_limit,
    ),
];

/// An ordinary user (`cloudsdk` of the test machine; slurmctld refused `nobody`'s
/// association with `Invalid account`).
const USER: (u32, u32, &str) = (1000, 1000, "cloudsdk");

fn main() -> ExitCode {
    let mut options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("site-policy-testbed"));
    options.accounting = true;
    run_scenarios(SCENARIOS, options, |bed| {
        let _ = bed.cancel_all();
        let _ = bed.client("scancel", &[&format!("--user={}", USER.2)]);
        wait_queue_empty(bed)
    })
}

fn sacctmgr(bed: &Testbed, args: &[&str]) {
    bed.sacctmgr(args)
        .unwrap_or_else(|e| panic!("sacctmgr {args:?}: {e}"));
}

/// An account with `users` in it, allowed QOS `normal` and `qos`.
fn account(bed: &Testbed, account: &str, users: &[&str], qos: &[&str]) {
    sacctmgr(bed, &["add", "account", account, "fairshare=1"]);
    let mut list = vec!["normal"];
    list.extend_from_slice(qos);
    for u in users {
        sacctmgr(
            bed,
            &[
                "add",
                "user",
                u,
                &format!("account={account}"),
                &format!("qos={}", list.join(",")),
            ],
        );
    }
    for u in users {
        wait_until(&format!("slurmctld knows {u} in {account}"), 30, || {
            bed.sshare(&["-n", "-P", "-A", account, "-u", u, "-o", "Account,User"])
                .is_ok_and(|out| out.lines().any(|l| l.trim() == format!("{account}|{u}")))
        });
    }
}

/// root's FairShare in `account`.
fn fairshare(bed: &Testbed, account: &str) -> f64 {
    let out = bed
        .sshare(&[
            "-n",
            "-P",
            "-A",
            account,
            "-u",
            "root",
            "-o",
            "Account,User,FairShare",
        ])
        .unwrap_or_default();
    out.lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .find(|f| f.len() == 3 && f[0] == account && f[1] == "root")
        .and_then(|f| f[2].parse().ok())
        .unwrap_or(f64::NAN)
}

/// Charges `account` `gpus` GPUs for `secs` seconds with an unmanaged job, then restarts
/// slurmctld so that fair-share is recomputed at once (it otherwise changes only every
/// PriorityCalcPeriod, a minute at least).
fn use_gpus(bed: &mut Testbed, account: &str, gpus: u32, secs: u32) {
    let id = submit(
        bed,
        &["-A", account, &format!("--gpus={gpus}"), "-o", "/dev/null"],
        &format!("#!/bin/sh\n#HADAR off\nsleep {secs}\n"),
    );
    wait_completed(bed, id, 60);
    bed.restart_controller().unwrap_or_else(|e| panic!("{e}"));
}

/// Fills every GPU but the p100s of n2 with unmanaged jobs, leaving `free` p100s.
fn leave_p100s(bed: &Testbed, free: u32) -> Vec<u32> {
    let mut what = vec![
        ("n1", "gpu:v100:4".to_string()),
        ("n3", "gpu:k80:4".to_string()),
        ("n4", "gpu:v100:2,gpu:k80:2".to_string()),
    ];
    if free < 4 {
        what.push(("n2", format!("gpu:p100:{}", 4 - free)));
    }
    let what: Vec<(&str, &str)> = what.iter().map(|(n, g)| (*n, g.as_str())).collect();
    occupy(bed, &what)
}

fn start_time(bed: &Testbed, id: u32) -> String {
    bed.job(id).unwrap().field("StartTime").unwrap_or_default()
}

/// Submits one 1-GPU managed job under `account` of about `secs` seconds on a p100, before
/// the daemon runs (so both are planned in the same round).
fn contender(bed: &Testbed, account: &str, secs: f64) -> u32 {
    let steps = (gavel_rate("resnet50-b64", "p100", 1) * TIME_SCALE * secs) as u64;
    submit(
        bed,
        &["-A", account, "--gpus=1", "-o", "/dev/null"],
        &script("resnet50-b64", steps, ""),
    )
}

/// With one p100 free and two equal jobs, the job of the account with the higher
/// fair-share runs first; `first` must win.
fn race(bed: &Testbed, name: &str, first: &str, second: &str) -> (u32, u32, String) {
    let fillers = leave_p100s(bed, 1);
    // The loser is submitted first: arrival order alone would favour it.
    let loser = contender(bed, second, 6.0);
    let winner = contender(bed, first, 6.0);
    let serve = Serve::start(bed, name);
    wait_state(bed, winner, &["RUNNING", "COMPLETED"], 60);
    let loser_state = bed
        .job(loser)
        .unwrap()
        .field("JobState")
        .unwrap_or_default();
    let explained = serve.hadar(&["explain", &winner.to_string()]);
    wait_completed(bed, winner, 90);
    wait_completed(bed, loser, 90);
    for f in fillers {
        let _ = bed.client("scancel", &[&f.to_string()]);
    }
    println!(
        "{first} (fair-share {:.3}) vs {second} (fair-share {:.3}): job {winner} started {}, job {loser} started {} (it was {loser_state} when the first ran)",
        fairshare(bed, first),
        fairshare(bed, second),
        start_time(bed, winner),
        start_time(bed, loser),
    );
    assert_eq!(loser_state, "PENDING", "{explained}");
    assert!(start_time(bed, winner) <= start_time(bed, loser));
    (winner, loser, explained)
}

/// `hadar explain ID`, or nothing while the daemon has no state database yet.
fn explain(serve: &Serve, id: u32) -> String {
    std::process::Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["explain", &id.to_string(), "--state"])
        .arg(&serve.state)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

// ----- scenarios -----

fn the_under_served_account_gets_the_contested_gpu(bed: &mut Testbed) {
    account(bed, "fs_a", &["root"], &[]);
    account(bed, "fs_b", &["root"], &[]);
    use_gpus(bed, "fs_a", 4, 3);
    wait_until("fs_a's fair-share falls below fs_b's", 30, || {
        fairshare(bed, "fs_a") < fairshare(bed, "fs_b")
    });
    let (_, _, explained) = race(bed, "fs-first", "fs_b", "fs_a");
    assert!(
        explained.contains("fair-share 1.000 x 10000"),
        "{explained}"
    );
    // fs_b now uses far more than fs_a did: the order reverses.
    use_gpus(bed, "fs_b", 4, 8);
    wait_until("fs_b's fair-share falls below fs_a's", 30, || {
        fairshare(bed, "fs_b") < fairshare(bed, "fs_a")
    });
    race(bed, "fs-second", "fs_a", "fs_b");
}

fn a_users_fifth_gpu_is_never_planned_under_max_tres_per_user(bed: &mut Testbed) {
    sacctmgr(bed, &["add", "qos", "gpu4", "MaxTRESPerUser=gres/gpu=4"]);
    account(bed, "lim_a", &["root", USER.2], &["gpu4"]);
    // Five v100s free (n1's four and one of n4's: one type, so no job waits for a faster
    // one); the user asks for five GPUs in five jobs, root for one, last.
    occupy(
        bed,
        &[
            ("n2", "gpu:p100:4"),
            ("n3", "gpu:k80:4"),
            ("n4", "gpu:v100:1,gpu:k80:2"),
        ],
    );
    let steps = (gavel_rate("resnet50-b64", "v100", 1) * TIME_SCALE * 60.0) as u64;
    let text = script("resnet50-b64", steps, "");
    let common = ["-A", "lim_a", "--qos=gpu4", "--gpus=1", "-o", "/dev/null"];
    let uid = format!("--uid={}", USER.0);
    let gid = format!("--gid={}", USER.1);
    let mut theirs = Vec::new();
    for _ in 0..5 {
        theirs.push(submit(bed, &[&common[..], &[&uid, &gid]].concat(), &text));
    }
    let mine = submit(bed, &common, &text);
    let serve = Serve::start(bed, "qos-limit");
    wait_state(bed, mine, &["RUNNING"], 60);
    wait_until("four of the user's jobs run", 60, || {
        theirs
            .iter()
            .filter(|id| bed.job(**id).unwrap().field("JobState").as_deref() == Some("RUNNING"))
            .count()
            == 4
    });
    // A few more rounds: the fifth stays held by hadar, never handed to Slurm.
    std::thread::sleep(std::time::Duration::from_secs(6));
    let fifth = *theirs
        .iter()
        .find(|id| bed.job(**id).unwrap().field("JobState").as_deref() == Some("PENDING"))
        .expect("one of the user's jobs pending");
    let info = bed.job(fifth).unwrap();
    let explained = serve.hadar(&["explain", &fifth.to_string()]);
    println!(
        "the user's fifth job {fifth}: Reason={} ; explain: {explained}",
        info.field("Reason").unwrap_or_default()
    );
    assert!(
        info.field("Reason")
            .unwrap_or_default()
            .starts_with("JobHeld"),
        "{}",
        info.0
    );
    assert!(
        explained.contains("QOS gpu4 MaxTRESPerUser=gres/gpu=4"),
        "{explained}"
    );
    let running = theirs
        .iter()
        .filter(|id| bed.job(**id).unwrap().field("JobState").as_deref() == Some("RUNNING"))
        .count();
    assert_eq!(running, 4);
}

fn a_job_waits_for_a_type_that_finishes_within_its_time_limit(bed: &mut Testbed) {
    // Only n3's k80s are free; the job needs about 15 s on a v100 and over 60 s (its time
    // limit) on a k80.
    let fillers = occupy(
        bed,
        &[
            ("n1", "gpu:v100:4"),
            ("n2", "gpu:p100:4"),
            ("n4", "gpu:v100:2,gpu:k80:2"),
        ],
    );
    let v100 = gavel_rate("resnet50-b64", "v100", 1) * TIME_SCALE;
    let k80 = gavel_rate("resnet50-b64", "k80", 1) * TIME_SCALE;
    let steps = (v100 * 15.0) as u64;
    assert!(steps as f64 / k80 > 80.0, "the k80 must miss the limit");
    let id = submit(
        bed,
        &["--time=1", "--gpus=1", &output_args(bed)],
        &script("resnet50-b64", steps, ""),
    );
    // Without the rule, hadar would start it on a k80 at once (no look-ahead here).
    let serve = Serve::start_configured(bed, "time-limit", "earliest_finish_types = false\n", &[]);
    let mut explained = String::new();
    wait_until("explain names the time limit", 30, || {
        explained = explain(&serve, id);
        explained.contains("time limit of 60 s")
    });
    println!("job {id} while only k80s are free: {explained}");
    assert_eq!(
        bed.job(id).unwrap().field("JobState").as_deref(),
        Some("PENDING")
    );
    // A v100 frees up: the job runs there and completes within its limit.
    bed.client("scancel", &[&fillers[0].to_string()]).unwrap();
    wait_state(bed, id, &["RUNNING"], 60);
    let alloc = allocation(bed, id);
    assert!(alloc.iter().all(|(_, t, _)| t == "v100"), "{alloc:?}");
    let info = wait_completed(bed, id, 90);
    println!(
        "job {id} ran on {alloc:?} and ended {} (RunTime {})",
        info.field("JobState").unwrap_or_default(),
        info.field("RunTime").unwrap_or_default()
    );
}
