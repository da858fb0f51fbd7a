//! A site's own rules with `hadar serve` on the real test cluster with accounting (issue
//! #14): fair-share decides which account's job gets a contested GPU, a QOS's
//! `MaxTRESPerUser` keeps a user's fifth GPU out of the plan (and `explain` names it), and a
//! job whose time limit a slow type would exceed waits for a fast one and is not killed; a
//! reserved node goes only to the jobs of its reservation, which get only its nodes; a
//! limit on one GPU type (`gres/gpu:v100=2`) counts only that type, a parent account's
//! `GrpTRES` covers its children's jobs, an account's `GrpTRES=cpu=` counts its jobs' CPUs,
//! `GrpTRESRunMins` bounds the GPU-minutes left and
//! `GrpTRESMins` stops an account that used its GPU-minutes.
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
        "a_typed_gpu_limit_counts_only_that_type",
        a_typed_gpu_limit_counts_only_that_type,
    ),
    (
        "a_parent_accounts_grp_tres_covers_its_children",
        a_parent_accounts_grp_tres_covers_its_children,
    ),
    (
        "an_accounts_cpu_limit_counts_the_cpus_its_jobs_ask_for",
        an_accounts_cpu_limit_counts_the_cpus_its_jobs_ask_for,
    ),
    (
        "grp_tres_run_mins_bounds_the_gpu_minutes_left",
        grp_tres_run_mins_bounds_the_gpu_minutes_left,
    ),
    (
        "grp_tres_mins_stops_an_account_that_used_its_gpu_minutes",
        grp_tres_mins_stops_an_account_that_used_its_gpu_minutes,
    ),
    (
        "a_job_waits_for_a_type_that_finishes_within_its_time_limit",
        a_job_waits_for_a_type_that_finishes_within_its_time_limit,
    ),
    (
        "a_forked_jobs_copies_are_billed_to_its_account_and_qos",
        a_forked_jobs_copies_are_billed_to_its_account_and_qos,
    ),
    (
        "unmanaged_jobs_are_treated_as_without_hadar",
        unmanaged_jobs_are_treated_as_without_hadar,
    ),
    (
        "a_reserved_node_goes_only_to_its_reservations_jobs",
        a_reserved_node_goes_only_to_its_reservations_jobs,
    ),
    (
        "site_capture_writes_the_rules_the_daemon_reads",
        site_capture_writes_the_rules_the_daemon_reads,
    ),
];

/// An ordinary user (`cloudsdk` of the test machine; slurmctld refused `nobody`'s
/// association with `Invalid account`).
const USER: (u32, u32, &str) = (1000, 1000, "cloudsdk");

/// The reservation of the reservation scenario (deleted after every scenario).
const RESV: &str = "resv_n2";

fn main() -> ExitCode {
    let mut options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("site-policy-testbed"));
    options.accounting = true;
    run_scenarios(SCENARIOS, options, |bed| {
        let _ = bed.cancel_all();
        let _ = bed.client("scancel", &[&format!("--user={}", USER.2)]);
        let _ = bed.client("scontrol", &["delete", &format!("reservation={RESV}")]);
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

/// Adds `user` to the existing `account` and waits until slurmctld knows it.
fn account_user(bed: &Testbed, account: &str, user: &str) {
    sacctmgr(
        bed,
        &[
            "add",
            "user",
            user,
            &format!("account={account}"),
            "qos=normal",
        ],
    );
    wait_until(&format!("slurmctld knows {user} in {account}"), 30, || {
        bed.sshare(&["-n", "-P", "-A", account, "-u", user, "-o", "Account,User"])
            .is_ok_and(|out| out.lines().any(|l| l.trim() == format!("{account}|{user}")))
    });
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

/// Charges `account` `gpus` GPUs for `secs` seconds with an unmanaged job that must end in
/// one of `ends`, then restarts slurmctld so that fair-share is recomputed at once (it
/// otherwise changes only every PriorityCalcPeriod, a minute at least).
fn use_gpus(bed: &mut Testbed, account: &str, gpus: u32, secs: u32, ends: &[&str]) {
    let id = submit(
        bed,
        &["-A", account, &format!("--gpus={gpus}"), "-o", "/dev/null"],
        &format!("#!/bin/sh\n#HADAR off\nsleep {secs}\n"),
    );
    let info = wait_state(
        bed,
        id,
        &["COMPLETED", "TIMEOUT", "FAILED", "CANCELLED"],
        60,
    );
    let state = info.field("JobState").unwrap_or_default();
    assert!(
        ends.contains(&state.as_str()),
        "job {id} ended {state}: {}",
        info.0
    );
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
    use_gpus(bed, "fs_a", 4, 3, &["COMPLETED"]);
    wait_until("fs_a's fair-share falls below fs_b's", 30, || {
        fairshare(bed, "fs_a") < fairshare(bed, "fs_b")
    });
    let (_, _, explained) = race(bed, "fs-first", "fs_b", "fs_a");
    assert!(
        explained.contains("fair-share 1.000 x 10000"),
        "{explained}"
    );
    // fs_b now uses far more than fs_a did: the order reverses.
    use_gpus(bed, "fs_b", 4, 8, &["COMPLETED"]);
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
    serve.wait_rounds(bed, 3);
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
    // Where users look: squeue's Comment names the limit too.
    wait_until("squeue names the limit", 15, || {
        squeue_comment(bed, fifth)
            .starts_with("hadar: waiting for the site's limit QOS gpu4 MaxTRESPerUser")
    });
    let running = theirs
        .iter()
        .filter(|id| bed.job(**id).unwrap().field("JobState").as_deref() == Some("RUNNING"))
        .count();
    assert_eq!(running, 4);
}

/// What Slurm alone does with such a job: submits an unmanaged (`#HADAR off`) job with
/// `args` and waits until Slurm gives it a pending reason; its id and the reason.
fn unmanaged_pending_reason(bed: &Testbed, args: &[&str]) -> (u32, String) {
    let mut all = args.to_vec();
    all.extend(["-o", "/dev/null"]);
    let id = submit(bed, &all, "#!/bin/sh\n#HADAR off\nsleep 60\n");
    let mut reason = String::new();
    wait_until("Slurm gives the unmanaged job a reason", 30, || {
        reason = bed.job(id).unwrap().field("Reason").unwrap_or_default();
        reason != "None"
    });
    (id, reason)
}

fn state_of(bed: &Testbed, id: u32) -> String {
    bed.job(id).unwrap().field("JobState").unwrap_or_default()
}

fn a_typed_gpu_limit_counts_only_that_type(bed: &mut Testbed) {
    sacctmgr(bed, &["add", "qos", "v2", "MaxTRESPerUser=gres/gpu:v100=2"]);
    account(bed, "ty_a", &["root", USER.2], &["v2"]);
    // Free: n1's four v100s and one p100 of n2. The user's four 1-GPU jobs would all go to
    // the v100s (faster); the limit lets two run there, one on the p100, and one waits
    // (with two v100s free).
    let fillers = occupy(
        bed,
        &[
            ("n2", "gpu:p100:3"),
            ("n3", "gpu:k80:4"),
            ("n4", "gpu:v100:2,gpu:k80:2"),
        ],
    );
    let steps = (gavel_rate("resnet50-b64", "v100", 1) * TIME_SCALE * 60.0) as u64;
    let text = script("resnet50-b64", steps, "");
    let common = ["-A", "ty_a", "--qos=v2", "--gpus=1", "-o", "/dev/null"];
    let uid = format!("--uid={}", USER.0);
    let gid = format!("--gid={}", USER.1);
    let theirs: Vec<u32> = (0..4)
        .map(|_| submit(bed, &[&common[..], &[&uid, &gid]].concat(), &text))
        .collect();
    let serve = Serve::start(bed, "typed-limit");
    let running = |bed: &Testbed| -> Vec<u32> {
        theirs
            .iter()
            .copied()
            .filter(|id| state_of(bed, *id) == "RUNNING")
            .collect()
    };
    wait_until("three of the user's jobs run", 60, || {
        running(bed).len() == 3
    });
    // A few more rounds: nothing changes, the fourth stays held by hadar.
    serve.wait_rounds(bed, 3);
    let run = running(bed);
    let types: Vec<String> = run
        .iter()
        .flat_map(|id| allocation(bed, *id).into_iter().map(|(_, t, _)| t))
        .collect();
    let fourth = *theirs.iter().find(|id| !run.contains(id)).unwrap();
    let info = bed.job(fourth).unwrap();
    let explained = serve.hadar(&["explain", &fourth.to_string()]);
    println!(
        "the user's jobs run on {types:?}; the fourth {fourth}: {} Reason={}; explain: {explained}",
        info.field("JobState").unwrap_or_default(),
        info.field("Reason").unwrap_or_default()
    );
    assert_eq!(run.len(), 3);
    assert_eq!(
        types.iter().filter(|t| *t == "v100").count(),
        2,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "p100").count(),
        1,
        "{types:?}"
    );
    assert!(
        info.field("Reason")
            .unwrap_or_default()
            .starts_with("JobHeld"),
        "{}",
        info.0
    );
    assert!(
        explained.contains(
            "QOS v2 MaxTRESPerUser=gres/gpu:v100=2 (QOSMaxGRESPerUser) keeps it off v100"
        ),
        "{explained}"
    );
    // What Slurm itself does with the user's unmanaged jobs while two v100s are theirs:
    // a typed request pends for the limit; a typeless one on the v100 node is printed.
    let off = "#!/bin/sh\n#HADAR off\nsleep 60\n";
    let typed_req = submit(
        bed,
        &[
            "-A",
            "ty_a",
            "--qos=v2",
            "--gres=gpu:v100:1",
            "-o",
            "/dev/null",
            &uid,
            &gid,
        ],
        off,
    );
    let untyped_req = submit(
        bed,
        &[
            "-A",
            "ty_a",
            "--qos=v2",
            "--gpus=1",
            "-w",
            "n1",
            "-o",
            "/dev/null",
            &uid,
            &gid,
        ],
        off,
    );
    let mut reason = String::new();
    wait_until("Slurm gives the typed request a reason", 30, || {
        reason = bed
            .job(typed_req)
            .unwrap()
            .field("Reason")
            .unwrap_or_default();
        reason != "None"
    });
    std::thread::sleep(std::time::Duration::from_secs(3));
    let untyped = bed.job(untyped_req).unwrap();
    println!(
        "Slurm alone, the user's unmanaged jobs: --gres=gpu:v100:1 {} Reason={reason}; --gpus=1 -w n1 {} Reason={}",
        state_of(bed, typed_req),
        untyped.field("JobState").unwrap_or_default(),
        untyped.field("Reason").unwrap_or_default()
    );
    assert_eq!(reason, "QOSMaxGRESPerUser");
    drop(serve);
    for id in theirs.iter().chain(&fillers) {
        let _ = bed.client("scancel", &[&id.to_string()]);
    }
}

fn a_parent_accounts_grp_tres_covers_its_children(bed: &mut Testbed) {
    sacctmgr(
        bed,
        &[
            "add",
            "account",
            "dept",
            "fairshare=1",
            "GrpTRES=gres/gpu=3",
        ],
    );
    for kid in ["kid1", "kid2"] {
        sacctmgr(bed, &["add", "account", kid, "parent=dept", "fairshare=1"]);
    }
    for kid in ["kid1", "kid2"] {
        account_user(bed, kid, "root");
    }
    account(bed, "nodept", &["root"], &[]);
    // Every GPU is free. Two 1-GPU jobs in each child account: three run, the fourth waits
    // for dept's GrpTRES; a job of another account runs.
    let steps = (gavel_rate("resnet50-b64", "v100", 1) * TIME_SCALE * 60.0) as u64;
    let text = script("resnet50-b64", steps, "");
    let kids: Vec<u32> = ["kid1", "kid1", "kid2", "kid2"]
        .iter()
        .map(|a| submit(bed, &["-A", a, "--gpus=1", "-o", "/dev/null"], &text))
        .collect();
    let other = submit(bed, &["-A", "nodept", "--gpus=1", "-o", "/dev/null"], &text);
    let serve = Serve::start(bed, "parent-limit");
    wait_state(bed, other, &["RUNNING"], 60);
    let running = |bed: &Testbed| -> usize {
        kids.iter()
            .filter(|id| state_of(bed, **id) == "RUNNING")
            .count()
    };
    wait_until("three of dept's jobs run", 60, || running(bed) == 3);
    serve.wait_rounds(bed, 3);
    assert_eq!(running(bed), 3);
    let waiting = *kids
        .iter()
        .find(|id| state_of(bed, **id) == "PENDING")
        .expect("one of dept's jobs pending");
    let info = bed.job(waiting).unwrap();
    let explained = serve.hadar(&["explain", &waiting.to_string()]);
    // What Slurm itself does with such a job: an unmanaged one in kid2 pends for the
    // parent's limit.
    let (unmanaged, slurm_reason) = unmanaged_pending_reason(bed, &["-A", "kid2", "--gpus=1"]);
    println!(
        "dept's waiting job {waiting}: Reason={} ; explain: {explained}; an unmanaged kid2 job: {} Reason={slurm_reason}",
        info.field("Reason").unwrap_or_default(),
        state_of(bed, unmanaged),
    );
    assert!(
        info.field("Reason")
            .unwrap_or_default()
            .starts_with("JobHeld"),
        "{}",
        info.0
    );
    assert!(
        explained.contains("account dept GrpTRES=gres/gpu=3 (AssocGrpGRES)"),
        "{explained}"
    );
    assert_eq!(slurm_reason, "AssocGrpGRES");
    drop(serve);
}

fn an_accounts_cpu_limit_counts_the_cpus_its_jobs_ask_for(bed: &mut Testbed) {
    sacctmgr(
        bed,
        &["add", "account", "cpu_a", "fairshare=1", "GrpTRES=cpu=4"],
    );
    account_user(bed, "cpu_a", "root");
    // Every GPU is free, and each job asks for one GPU and 2 CPUs: two fit in cpu_a's 4
    // CPUs, the third waits for the account's CPUs, not for a GPU.
    let held = one_held_by_a_limit(bed, "cpu-limit", &["-A", "cpu_a", "--gpus=1", "-c", "2"], 3);
    assert!(
        held.slurm_state.starts_with("JobHeld"),
        "{}",
        held.slurm_state
    );
    assert!(
        held.explained
            .contains("account cpu_a GrpTRES=cpu=4 (AssocGrpCpuLimit)"),
        "{}",
        held.explained
    );
    let comment = squeue_comment(bed, held.waiting);
    assert!(comment.contains("AssocGrpCpuLimit"), "{comment}");
    assert_eq!(held.slurm_reason, "AssocGrpCpuLimit");
}

/// What a limit scenario saw of its one held job.
struct HeldByLimit {
    /// The held job.
    waiting: u32,
    /// Its `Reason` in Slurm (hadar holds it: `JobHeldUser`).
    slurm_state: String,
    /// `hadar explain` of it.
    explained: String,
    /// Slurm's pending reason for an unmanaged job submitted the same way.
    slurm_reason: String,
}

/// Submits `jobs` managed jobs with `args`, starts `hadar serve` (state `name`), waits
/// until all but one run and stay so, and returns what hadar and Slurm say of the held one.
fn one_held_by_a_limit(bed: &mut Testbed, name: &str, args: &[&str], jobs: usize) -> HeldByLimit {
    let steps = (gavel_rate("resnet50-b64", "v100", 1) * TIME_SCALE * 60.0) as u64;
    let text = script("resnet50-b64", steps, "");
    let mut submitted = args.to_vec();
    submitted.extend(["-o", "/dev/null"]);
    let ids: Vec<u32> = (0..jobs).map(|_| submit(bed, &submitted, &text)).collect();
    let serve = Serve::start(bed, name);
    let running = |bed: &Testbed| {
        ids.iter()
            .filter(|id| state_of(bed, **id) == "RUNNING")
            .count()
    };
    let runs = jobs - 1;
    wait_until(&format!("{runs} of {args:?} run"), 60, || {
        running(bed) == runs
    });
    serve.wait_rounds(bed, 3);
    assert_eq!(running(bed), runs);
    let waiting = *ids
        .iter()
        .find(|id| state_of(bed, **id) == "PENDING")
        .expect("one job pending");
    let slurm_state = bed
        .job(waiting)
        .unwrap()
        .field("Reason")
        .unwrap_or_default();
    let explained = serve.hadar(&["explain", &waiting.to_string()]);
    let (unmanaged, slurm_reason) = unmanaged_pending_reason(bed, args);
    drop(serve);
    println!(
        "{args:?}: waiting job {waiting}: Reason={slurm_state} ; explain: {explained}; an unmanaged one: {} Reason={slurm_reason}",
        state_of(bed, unmanaged),
    );
    HeldByLimit {
        waiting,
        slurm_state,
        explained,
        slurm_reason,
    }
}

fn grp_tres_run_mins_bounds_the_gpu_minutes_left(bed: &mut Testbed) {
    account(bed, "rm_a", &["root"], &[]);
    sacctmgr(
        bed,
        &[
            "modify",
            "account",
            "rm_a",
            "set",
            "GrpTRESRunMins=gres/gpu=10",
        ],
    );
    // Every GPU is free. Four 1-GPU jobs of 3 minutes: three make 9 GPU-minutes, the
    // fourth would make 12.
    let held = one_held_by_a_limit(bed, "run-mins", &["-A", "rm_a", "--gpus=1", "--time=3"], 4);
    assert!(
        held.explained
            .contains("account rm_a GrpTRESRunMins=gres/gpu=10 (AssocGrpGRESRunMinutes)"),
        "{}",
        held.explained
    );
    assert_eq!(held.slurm_reason, "AssocGrpGRESRunMinutes");
}

/// `sshare`'s `GrpTRESRaw` on `gres/gpu` (GPU-minutes) of `account`'s own row.
fn used_gpu_minutes(bed: &Testbed, account: &str) -> u64 {
    let out = bed
        .sshare(&["-n", "-P", "-A", account, "-o", "Account,User,GrpTRESRaw"])
        .unwrap_or_default();
    hadar_slurm::site::parse_gpu_usage(&out)
        .get(&(account.to_string(), String::new()))
        .copied()
        .unwrap_or(0)
}

fn grp_tres_mins_stops_an_account_that_used_its_gpu_minutes(bed: &mut Testbed) {
    sacctmgr(
        bed,
        &[
            "add",
            "account",
            "mins_a",
            "fairshare=1",
            "GrpTRESMins=gres/gpu=1",
        ],
    );
    account_user(bed, "mins_a", "root");
    // 4 GPUs x 20 s: more than the account's one GPU-minute. Slurm's decay thread (every
    // PriorityCalcPeriod) kills an association's running jobs once GrpTRESMins is used up,
    // so the job ends TIMEOUT when a tick falls in its last seconds.
    use_gpus(bed, "mins_a", 4, 20, &["COMPLETED", "TIMEOUT"]);
    wait_until("sshare shows mins_a's GPU-minute", 90, || {
        used_gpu_minutes(bed, "mins_a") >= 1
    });
    let steps = (gavel_rate("resnet50-b64", "v100", 1) * TIME_SCALE * 30.0) as u64;
    let id = submit(
        bed,
        &["-A", "mins_a", "--gpus=1", "-o", "/dev/null"],
        &script("resnet50-b64", steps, ""),
    );
    let serve = Serve::start(bed, "tres-mins");
    let mut explained = String::new();
    wait_until("explain names GrpTRESMins", 30, || {
        explained = explain(&serve, id);
        explained.contains("AssocGrpGRESMinutes")
    });
    serve.wait_rounds(bed, 3);
    let info = bed.job(id).unwrap();
    let (unmanaged, slurm_reason) = unmanaged_pending_reason(bed, &["-A", "mins_a", "--gpus=1"]);
    println!(
        "mins_a used {} GPU-minute(s); its job {id}: {} Reason={}; explain: {explained}; an unmanaged mins_a job: {} Reason={slurm_reason}",
        used_gpu_minutes(bed, "mins_a"),
        info.field("JobState").unwrap_or_default(),
        info.field("Reason").unwrap_or_default(),
        state_of(bed, unmanaged)
    );
    assert_eq!(info.field("JobState").as_deref(), Some("PENDING"));
    assert!(
        explained.contains("account mins_a GrpTRESMins=gres/gpu=1"),
        "{explained}"
    );
    assert_eq!(slurm_reason, "AssocGrpGRESMinutes");
    drop(serve);
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

// ----- forked jobs -----

/// Starts `hadar serve` with `policy = "hadare"` and rounds of 8 s, its spool (sticky, for
/// every user's copy jobs) beside its state database.
fn serve_forking(bed: &Testbed, name: &str) -> (Serve, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let config = bed.path(&format!("etc/fork-{name}.toml"));
    let state = bed.path(&format!("state-fork-{name}.db"));
    let spool = bed.path(&format!("spool-{name}"));
    let _ = std::fs::remove_file(&state);
    let _ = std::fs::remove_dir_all(&spool);
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let text = format!(
        "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{conf}\"\n\n\
         [sidecar]\nsocket = \"{sock}\"\nstate = \"{state}\"\nround_seconds = 8\npreempt_grace_seconds = 1\n\
         restart_seconds = 2\ncommand_timeout_seconds = 10\npolicy = \"hadare\"\n\
         lease_seconds = 12\nmax_clock_skew_seconds = 1\n\n\
         [fork]\nspool = \"{spool}\"\nrunner = \"{runner}\"\ndeadline_margin_seconds = 2\nmax_failed_rounds = 2\n",
        conf = bed.path("etc/slurm.conf").display(),
        sock = bed.path("run/hadar.sock").display(),
        state = state.display(),
        spool = spool.display(),
        runner = fork_runner().display(),
    );
    std::fs::write(&config, text).unwrap();
    (Serve::spawn(bed, config, state), spool)
}

/// `sacct -X -P` rows (`JobID|JobName|Account|QOS|AllocTRES|ElapsedRaw|State|ReqTRES`) of the
/// copy jobs of forked job `id`, once slurmdbd has every one of `copy_jobs` ended.
fn sacct_copies(bed: &Testbed, id: u32, copy_jobs: usize) -> Vec<Vec<String>> {
    let prefix = format!("hadar-fork-{id}-r");
    let mut rows: Vec<Vec<String>> = Vec::new();
    wait_until(
        &format!("sacct records {copy_jobs} copy jobs of {id}"),
        60,
        || {
            let out = bed
                .sacct(&[
                    "-n",
                    "-X",
                    "-P",
                    "-a",
                    "-S",
                    "now-1hour",
                    "-o",
                    "JobID,JobName,Account,QOS,AllocTRES,ElapsedRaw,State,ReqTRES",
                ])
                .unwrap_or_default();
            rows = out
                .lines()
                .map(|l| l.split('|').map(str::to_string).collect::<Vec<_>>())
                .filter(|f| f.len() == 8 && f[1].starts_with(&prefix))
                .collect();
            let leaders: std::collections::BTreeSet<&str> = rows
                .iter()
                .map(|f| f[0].split('+').next().unwrap_or(""))
                .collect();
            leaders.len() >= copy_jobs
                && rows.iter().all(|f| {
                    f[6] != "RUNNING" && f[6] != "PENDING" && !f.contains(&"Unknown".into())
                })
        },
    );
    rows
}

/// A TRES list's value of `key` (`cpu=4,mem=2000M,gres/gpu=2`), in MB for `mem`.
fn tres(list: &str, key: &str) -> Option<f64> {
    let v = list
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))?;
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "G" => n * 1024.0,
        "T" => n * 1024.0 * 1024.0,
        "K" => n / 1024.0,
        _ => n,
    })
}

fn a_forked_jobs_copies_are_billed_to_its_account_and_qos(bed: &mut Testbed) {
    sacctmgr(bed, &["add", "qos", "fk_qos"]);
    account(bed, "fk_acct", &[USER.2], &["fk_qos"]);
    let (serve, _spool) = serve_forking(bed, "billing");
    let dir = fork_jobs_dir(bed);
    let script = format!(
        "#!/bin/sh\n#HADAR fork=yes steps=400\nexec {runner} -- /usr/bin/perl {prog}\n",
        runner = fork_runner().display(),
        prog = dir.join("train.pl").display(),
    );
    // Two GPUs, four CPUs and 2000 MB: 2 CPUs and 1000 MB per GPU.
    let id = submit(
        bed,
        &[
            &format!("--uid={}", USER.0),
            &format!("--gid={}", USER.1),
            "-A",
            "fk_acct",
            "--qos=fk_qos",
            "--gpus=2",
            "--cpus-per-task=4",
            "--mem=2000M",
            "--time=10",
            &format!("--output={}/out-%j.txt", dir.display()),
        ],
        &script,
    );
    let info = wait_completed(bed, id, 240);
    let status: serde_json::Value =
        serde_json::from_str(&serve.hadar(&["status", "--all", "--format", "json"])).unwrap();
    let job = status["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == id).cloned())
        .unwrap_or_default();
    let rounds = job["fork"]["rounds"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(job["fork"]["state"], "done", "{job:#}");
    let copy_jobs = rounds.iter().filter(|r| !r["copy_job"].is_null()).count();
    let rows = sacct_copies(bed, id, copy_jobs);
    let (mut sacct_gpu_s, mut gpus_billed) = (0.0, 0.0);
    for f in &rows {
        let gpus = tres(&f[4], "gres/gpu").unwrap_or(0.0);
        assert_eq!(f[2], "fk_acct", "billed to the job's account: {f:?}");
        assert_eq!(f[3], "fk_qos", "under the job's QOS: {f:?}");
        assert!(gpus >= 1.0, "{f:?}");
        assert_eq!(
            tres(&f[4], "cpu"),
            Some(2.0 * gpus),
            "2 CPUs per GPU: {f:?}"
        );
        // Memory is not a consumable resource in the test cluster (CR_Core): sacct shows it
        // requested (ReqTRES), not allocated.
        assert_eq!(
            tres(&f[7], "mem"),
            Some(1000.0 * gpus),
            "1000 MB per GPU: {f:?}"
        );
        sacct_gpu_s += gpus * f[5].parse::<f64>().unwrap();
        gpus_billed += gpus;
    }
    let daemon_gpu_s = job["fork"]["gpu_seconds"].as_f64().unwrap_or(f64::NAN);
    println!(
        "forked job {id} ({}): {copy_jobs} copy jobs, {} components in sacct: {rows:?}; \
         sacct {sacct_gpu_s} GPU-s, the daemon {daemon_gpu_s} GPU-s",
        info.field("JobState").unwrap_or_default(),
        rows.len()
    );
    assert!(copy_jobs >= 1 && !rows.is_empty(), "{job:#}");
    // Both count whole seconds: at most one second per GPU apart.
    assert!(
        (sacct_gpu_s - daemon_gpu_s).abs() <= gpus_billed,
        "sacct {sacct_gpu_s} GPU-s, the daemon {daemon_gpu_s}"
    );
}

// ----- unmanaged jobs -----

/// What Slurm did with an unmanaged job: whether it was ever held, its highest Priority
/// while it waited for its begin time, `sprio`'s factors when `sprio` showed it (`Priority|Age|FairShare|JobSize|
/// Partition|QOS`, weighted), its Comment, and `sacct`'s `Account|QOS|State` once it ended.
#[derive(Debug, Default)]
struct Treatment {
    held: bool,
    priority: u64,
    factors: Vec<f64>,
    comment: String,
    billed: String,
    /// Each (JobState, Reason, sprio's line) seen, once.
    seen: Vec<String>,
}

/// Submits unmanaged jobs (`(sbatch arguments, script)`) that may start 10 s later (so that
/// they wait and `sprio`, which shows pending jobs only, may see them), together, and records
/// how Slurm treats each until it completes. `sprio` sometimes does not find a pending job
/// for all of those 10 s (nor 40 s: "Unable to find jobs matching", with or without hadar):
/// its factors are compared when it did.
fn unmanaged_treatments(bed: &Testbed, jobs: &[(&[&str], &str)]) -> Vec<Treatment> {
    let ids: Vec<u32> = jobs
        .iter()
        .map(|(args, text)| submit(bed, &[args, &["--begin=now+10"][..]].concat(), text))
        .collect();
    let mut ts: Vec<Treatment> = ids.iter().map(|_| Treatment::default()).collect();
    wait_until(&format!("unmanaged jobs {ids:?} complete"), 90, || {
        // Every job looked at each time (no short cut), so none misses its pending state.
        let done: Vec<bool> = ids
            .iter()
            .zip(ts.iter_mut())
            .map(|(&id, t)| observe(bed, id, t))
            .collect();
        done.into_iter().all(|d| d)
    });
    for (&id, t) in ids.iter().zip(ts.iter_mut()) {
        wait_until(&format!("sacct records job {id}"), 30, || {
            t.billed = bed.sacct_job(id, "Account,QOS,State").trim().to_string();
            t.billed.ends_with("|COMPLETED")
        });
    }
    ts
}

/// One look at unmanaged job `id`, added to `t`; true once it completed.
fn observe(bed: &Testbed, id: u32, t: &mut Treatment) -> bool {
    let Ok(j) = bed.job(id) else { return false };
    t.held |= j.field("Reason").is_some_and(|r| r.starts_with("JobHeld"));
    t.comment = j.field("Comment").unwrap_or_default();
    if t.factors.is_empty() && j.field("JobState").as_deref() == Some("PENDING") {
        let sprio = bed
            .client(
                "sprio",
                &["-h", "-j", &id.to_string(), "-o", "%Y %A %F %J %P %Q"],
            )
            .unwrap_or_default();
        let f: Vec<f64> = sprio
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        let what = format!(
            "{} {} sprio={:?}",
            j.field("JobState").unwrap_or_default(),
            j.field("Reason").unwrap_or_default(),
            sprio.trim()
        );
        if t.seen.last() != Some(&what) {
            t.seen.push(what);
        }
        if f.len() == 6 {
            t.factors = f;
        }
    }
    if j.field("JobState").as_deref() == Some("PENDING") {
        let p = j
            .field("Priority")
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        t.priority = t.priority.max(p);
    }
    j.field("JobState").as_deref() == Some("COMPLETED")
}

fn unmanaged_jobs_are_treated_as_without_hadar(bed: &mut Testbed) {
    sacctmgr(bed, &["add", "qos", "un_qos", "priority=100"]);
    account(bed, "un_acct", &["root"], &["un_qos"]);
    let common = ["-A", "un_acct", "--qos=un_qos", "-o", "/dev/null"];
    let gpu_off = [&common[..], &["-p", "gpu", "--gpus=1"]].concat();
    let cpu_job = [&common[..], &["-p", "cpu", "-n", "2"]].concat();
    let off_text = "#!/bin/sh\n#HADAR off\nsleep 1\n";
    let cpu_text = "#!/bin/sh\nsleep 1\n";
    // Without hadar's daemon, then with it: the same jobs, the same treatment.
    let shapes: [(&[&str], &str); 2] = [(&gpu_off, off_text), (&cpu_job, cpu_text)];
    let before = unmanaged_treatments(bed, &shapes);
    let serve = Serve::start(bed, "unmanaged");
    let during = unmanaged_treatments(bed, &shapes);
    let status = serve.hadar(&["status", "--all", "--format", "json"]);
    println!("unmanaged jobs without hadar: {before:?}\nwith hadar serve: {during:?}");
    for (b, d) in before.iter().zip(&during) {
        assert!(!b.held && !d.held, "never held: {b:?} {d:?}");
        // Slurm's multifactor priority, nothing else: the sum of sprio's factors, and the
        // same QOS, partition and size factors as without hadar (fair-share and age move
        // with time and usage).
        for t in [b, d] {
            assert!(t.priority > 0, "Slurm gave it a priority: {t:?}");
            if let [total, factors @ ..] = &t.factors[..] {
                let sum: f64 = factors.iter().sum();
                assert!((total - sum).abs() <= 5.0, "{t:?}");
            }
        }
        if b.factors.len() == 6 && d.factors.len() == 6 {
            assert_eq!(b.factors[3..], d.factors[3..], "{b:?} {d:?}");
        }
        assert_eq!(d.comment, b.comment, "Comment untouched");
        assert!(d.comment.is_empty() || d.comment == "(null)", "{d:?}");
        assert_eq!(d.billed, "un_acct|un_qos|COMPLETED");
        assert_eq!(b.billed, d.billed);
    }
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        v["jobs"].as_array().map(Vec::len),
        Some(0),
        "the daemon manages none: {status}"
    );
}

// ----- reservations -----

/// The nodes a job holds (empty before it runs).
fn nodes_of(bed: &Testbed, id: u32) -> Vec<String> {
    let mut n: Vec<String> = allocation(bed, id).into_iter().map(|p| p.0).collect();
    n.dedup();
    n
}

/// Reservation [`RESV`]: node n2 for root, from now for 30 minutes.
fn reserve_n2_for_root(bed: &Testbed) {
    bed.client(
        "scontrol",
        &[
            "create",
            "reservation",
            &format!("reservationname={RESV}"),
            "starttime=now",
            "duration=30",
            "nodes=n2",
            "users=root",
        ],
    )
    .unwrap_or_else(|e| panic!("scontrol create reservation: {e}"));
}

fn a_reserved_node_goes_only_to_its_reservations_jobs(bed: &mut Testbed) {
    account(bed, "resv_acct", &["root", USER.2], &[]);
    reserve_n2_for_root(bed);
    println!(
        "{}",
        bed.client("scontrol", &["show", "reservation", RESV])
            .unwrap_or_default()
    );
    // Only n2's four p100s (reserved for root) are free.
    let fillers = occupy(
        bed,
        &[
            ("n1", "gpu:v100:4"),
            ("n3", "gpu:k80:4"),
            ("n4", "gpu:v100:2,gpu:k80:2"),
        ],
    );
    let steps = (gavel_rate("resnet50-b64", "p100", 1) * TIME_SCALE * 40.0) as u64;
    let text = script("resnet50-b64", steps, "");
    let common = ["-A", "resv_acct", "--gpus=1", "--time=5", "-o", "/dev/null"];
    let uid = format!("--uid={}", USER.0);
    let gid = format!("--gid={}", USER.1);
    // Another user's job, submitted first: without the rule it would start on n2 at once.
    let other = submit(bed, &[&common[..], &[&uid, &gid]].concat(), &text);
    let resv_arg = format!("--reservation={RESV}");
    let mine = submit(bed, &[&common[..], &[&resv_arg]].concat(), &text);
    // The adapter reads it as this release answers.
    let slurm = hadar_slurm::Slurm::new(hadar_slurm::SlurmConfig {
        conf: Some(bed.path("etc/slurm.conf")),
        ..Default::default()
    });
    let read = slurm.reservations().unwrap_or_else(|e| panic!("{e}"));
    println!("the adapter reads: {read:?}");
    assert_eq!(read.len(), 1);
    assert_eq!(
        (read[0].name.as_str(), read[0].nodes.clone()),
        (RESV, vec!["n2".to_string()])
    );
    assert_eq!(read[0].users, vec!["root"]);
    let serve = Serve::start(bed, "reservation");
    wait_state(bed, mine, &["RUNNING"], 60);
    assert_eq!(nodes_of(bed, mine), vec!["n2"]);
    let reservation = bed.job(mine).unwrap().field("Reservation");
    // A few more rounds: the other user's job stays held by hadar, n2's GPUs free.
    serve.wait_rounds(bed, 3);
    let info = bed.job(other).unwrap();
    let explained = serve.hadar(&["explain", &other.to_string()]);
    println!(
        "job {mine} (--reservation, Reservation={reservation:?}) runs on n2; the other user's job {other}: {} Reason={} ; explain: {explained}",
        info.field("JobState").unwrap_or_default(),
        info.field("Reason").unwrap_or_default()
    );
    assert_eq!(
        reservation.as_deref(),
        Some(RESV),
        "the plugin keeps --reservation"
    );
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("PENDING"),
        "{}",
        info.0
    );
    assert!(
        explained.contains(&format!("reservation {RESV}")),
        "{explained}"
    );
    // Where users look: squeue's Comment names the reservation too.
    wait_until("squeue names the reservation", 15, || {
        squeue_comment(bed, other).starts_with(&format!("hadar: reservation {RESV}"))
    });
    // A v100 node frees up: the other job runs there; a second reservation job still gets
    // n2's slower p100s, the only GPUs it is offered.
    bed.client("scancel", &[&fillers[0].to_string()]).unwrap();
    wait_state(bed, other, &["RUNNING"], 60);
    assert_eq!(nodes_of(bed, other), vec!["n1"]);
    let second = submit(bed, &[&common[..], &[&resv_arg]].concat(), &text);
    wait_state(bed, second, &["RUNNING"], 60);
    let explained = serve.hadar(&["explain", &second.to_string()]);
    println!(
        "second reservation job {second}: {:?}; {explained}",
        allocation(bed, second)
    );
    assert_eq!(nodes_of(bed, second), vec!["n2"]);
}

/// `hadar site capture` on the live cluster: a QOS with `GrpTRES=gres/gpu=4`, a reservation
/// of n2 and the partition set `DOWN` come out in the site file as the daemon reads them
/// every round (the adapter's figures), without Slurm's jobs, and the file reads back.
fn site_capture_writes_the_rules_the_daemon_reads(bed: &mut Testbed) {
    use hadar_daemon::site::file::SiteFile;
    use hadar_slurm::site::PartitionState;
    sacctmgr(bed, &["add", "qos", "cap4", "GrpTRES=gres/gpu=4"]);
    account(bed, "cap_acct", &["root"], &["cap4"]);
    reserve_n2_for_root(bed);
    bed.client("scontrol", &["update", "partitionname=gpu", "state=down"])
        .unwrap_or_else(|e| panic!("scontrol update partition: {e}"));
    let out = bed.path("site-captured.toml");
    let before = hadar_daemon::daemon::now_unix();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["site", "capture", "--out"])
        .arg(&out)
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .output()
        .expect("run hadar site capture");
    let _ = bed.client("scontrol", &["update", "partitionname=gpu", "state=up"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    println!("{text}");
    let file = SiteFile::load(&out).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let at = file.captured_unix.expect("the capture's time") as f64;
    assert!(
        (at - before).abs() < 30.0,
        "captured at {at}, run at {before}"
    );
    let f = &file.slurm;
    assert!(f.jobs.is_empty(), "no Slurm jobs in a site file");
    let qos = f.qos.iter().find(|q| q.name == "cap4").expect("QOS cap4");
    assert_eq!(qos.grp_tres.gpus, Some(4), "{qos:?}");
    assert!(f.config.enforce_limits, "{:?}", f.config);
    let resv = f
        .reservations
        .iter()
        .find(|r| r.name == RESV)
        .expect("the reservation");
    assert_eq!(resv.nodes, vec!["n2".to_string()]);
    assert!(resv.users.contains(&"root".to_string()), "{resv:?}");
    let gpu = f
        .partitions
        .iter()
        .find(|p| p.name == "gpu")
        .expect("partition gpu");
    assert_eq!(gpu.state, PartitionState::Down);
    // A simulated job named as root in cap_acct under cap4 gets the captured rules.
    let with_jobs = format!(
        "{text}\n[[job]]\njobs = \"0-1\"\nuser = \"root\"\naccount = \"cap_acct\"\nqos = \"cap4\"\npartition = \"gpu\"\n"
    );
    let named = SiteFile::parse(&with_jobs, "captured").unwrap();
    let ids = named.identities(2, "captured").unwrap();
    assert_eq!(ids[&1].qos, "cap4");
}
