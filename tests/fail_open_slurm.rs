//! Fail-open against a real Slurm (the shared test cluster: n1 4 V100, n2 4 P100, n3 4 K80,
//! n4 2 V100 + 2 K80): the daemon killed for good while managed jobs wait, `hadar fail-open`
//! (run by hand here, as the systemd timer would) hands them to Slurm with their own GPU
//! requests once no round completed for `fail_open_after`; the daemon started again takes
//! back what Slurm has not started and adopts what runs. `harness = false`: arguments are
//! name filters, `--skip NAME`, `--list`.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Scenario, Testbed, run_scenarios};
use serve::*;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// Seconds without a round after which the cluster fails open, in these tests.
const FAIL_OPEN_AFTER: u64 = 6;

/// The leader's lease in these tests (more than the 1 s grace plus the 10 s command timeout).
const LEASE_SECONDS: u64 = 12;

const SCENARIOS: &[Scenario] = &[
    (
        "standby_leads_within_the_bound_after_the_leader_is_killed",
        standby_leads_within_the_bound_after_the_leader_is_killed,
    ),
    (
        "killed_daemon_waiting_jobs_fail_open_and_complete_with_their_own_request",
        killed_daemon_waiting_jobs_fail_open_and_complete_with_their_own_request,
    ),
    (
        "daemon_back_takes_back_waiting_jobs_and_adopts_running_ones",
        daemon_back_takes_back_waiting_jobs_and_adopts_running_ones,
    ),
    (
        "a_held_array_fails_open_whole_and_slurm_runs_it",
        a_held_array_fails_open_whole_and_slurm_runs_it,
    ),
];

fn main() -> ExitCode {
    let options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fail-open-testbed"));
    run_scenarios(SCENARIOS, options, |bed| {
        let _ = bed.cancel_all();
        wait_queue_empty(bed);
    })
}

/// A daemon for scenario `name` that fails open after [`FAIL_OPEN_AFTER`] s.
fn start_daemon(bed: &Testbed, name: &str) -> Serve {
    let state = bed.path(&format!("state-fail-open-{name}.db"));
    for suffix in ["", "-wal", "-shm", ".heartbeat", ".heartbeat.fail-open"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", state.display()));
    }
    start_on(bed, name, &state, "hadar.sock")
}

/// A daemon with its own config `name` (and notice socket `socket`) on the state `state`.
fn start_on(bed: &Testbed, name: &str, state: &Path, socket: &str) -> Serve {
    let (config, state) = configure(bed, name, state, socket);
    Serve::spawn(bed, config, state)
}

/// Writes the config `name` of a daemon on `state` with notice socket `socket`; the config's
/// path and the state's.
fn configure(bed: &Testbed, name: &str, state: &Path, socket: &str) -> (PathBuf, PathBuf) {
    let config = bed.path(&format!("etc/fail-open-{name}.toml"));
    let state = state.to_path_buf();
    let text = format!(
        "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{conf}\"\n\n\
         [sidecar]\nsocket = \"{sock}\"\nstate = \"{state}\"\nround_seconds = 2\npreempt_grace_seconds = 1\n\
         restart_seconds = 2\nthroughput_scale = {TIME_SCALE}\ncommand_timeout_seconds = 10\n\
         fail_open_after = {FAIL_OPEN_AFTER}\nlease_seconds = {LEASE_SECONDS}\nmax_clock_skew_seconds = 1\n",
        conf = bed.path("etc/slurm.conf").display(),
        sock = bed.path(&format!("run/{socket}")).display(),
        state = state.display(),
    );
    std::fs::write(&config, text).expect("write the daemon's config");
    (config, state)
}

fn heartbeat(serve: &Serve) -> PathBuf {
    PathBuf::from(format!("{}.heartbeat", serve.state.display()))
}

/// Runs `hadar ARGS --config CONFIG`; (success, stdout, stderr).
fn hadar_config(bed: &Testbed, config: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .output()
        .expect("run hadar");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `hadar fail-open --format json`: the jobs it released.
fn fail_open(bed: &Testbed, config: &Path) -> (bool, Vec<u64>) {
    let (ok, out, err) = hadar_config(bed, config, &["fail-open", "--format", "json"]);
    assert!(ok, "hadar fail-open failed: {out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let released = v["released"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_u64().unwrap())
        .collect();
    (v["failed_open"].as_bool().unwrap(), released)
}

fn field(bed: &Testbed, id: u32, key: &str) -> String {
    bed.job(id)
        .ok()
        .and_then(|j| j.field(key))
        .unwrap_or_default()
}

/// Submits a managed ResNet-50 training job of `steps` asking for `gpus` (an sbatch option).
fn train(bed: &Testbed, gpus: &str, steps: u64) -> u32 {
    submit(
        bed,
        &[gpus, &output_args(bed)],
        &script("resnet50-b64", steps, ""),
    )
}

fn finish_once(bed: &Testbed, id: u32, steps: u64) {
    let info = wait_completed(bed, id, 180);
    assert_eq!(info.field("Restarts").as_deref(), Some("0"), "{}", info.0);
    let out = output(bed, id);
    assert_eq!(
        out.matches(&format!("completed {steps} steps")).count(),
        1,
        "job {id} ran once to the end: {out}"
    );
}

// ----- scenarios -----

fn killed_daemon_waiting_jobs_fail_open_and_complete_with_their_own_request(bed: &mut Testbed) {
    let mut serve = start_daemon(bed, "killed");
    let steps = 3000;
    // A job the daemon starts before it dies keeps running, untouched.
    let running = train(bed, "--gpus=2", steps);
    wait_state(bed, running, &["RUNNING"], 30);
    wait_until("a heartbeat", 10, || heartbeat(&serve).exists());
    serve.kill();
    let died = Instant::now();

    // Submitted while the daemon is dead: held by the plugin, their GPU request stripped.
    let typed = train(bed, "--gres=gpu:k80:2", steps);
    let per_job = train(bed, "--gpus=3", steps);
    let unmanaged = submit(
        bed,
        &["--gres=gpu:p100:1", &output_args(bed)],
        "#!/bin/sh\n#HADAR off\nsleep 2\necho unmanaged done\n",
    );
    for id in [typed, per_job] {
        assert!(
            field(bed, id, "JobState") == "PENDING"
                && field(bed, id, "Reason").starts_with("JobHeld"),
            "held by the plugin: {}",
            detail(bed, id)
        );
    }

    // Before the limit, fail-open does nothing.
    let (failed, released) = fail_open(bed, &serve.config);
    assert!(
        !failed && released.is_empty(),
        "the heartbeat is {} s old",
        died.elapsed().as_secs()
    );
    assert!(field(bed, typed, "Reason").starts_with("JobHeld"));
    let (_, status, _) = hadar_config(bed, &serve.config, &["status"]);
    assert!(!status.contains("FAILED OPEN"), "{status}");

    std::thread::sleep(Duration::from_secs(FAIL_OPEN_AFTER + 1).saturating_sub(died.elapsed()));
    // Two runs at once (a timer and an admin): each job is handed over once.
    let config = serve.config.clone();
    let other = {
        let slurm_conf = bed.path("etc/slurm.conf");
        std::thread::spawn(move || {
            Command::new(env!("CARGO_BIN_EXE_hadar"))
                .args(["fail-open", "--format", "json", "--config"])
                .arg(&config)
                .env("SLURM_CONF", slurm_conf)
                .output()
                .expect("run hadar fail-open")
        })
    };
    let (failed, mut released) = fail_open(bed, &serve.config);
    let other = other.join().unwrap();
    assert!(
        other.status.success(),
        "{}",
        String::from_utf8_lossy(&other.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&other.stdout).unwrap();
    released.extend(
        v["released"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j.as_u64().unwrap()),
    );
    released.sort();
    assert!(failed);
    assert_eq!(
        released,
        vec![u64::from(typed), u64::from(per_job)],
        "each waiting managed job released once, nothing else"
    );
    // Each carries its own request again, and the mark.
    let info = bed.job(typed).unwrap();
    assert!(
        info.gres_field("TresPerNode")
            .is_some_and(|t| t.contains("gpu:k80:2")),
        "{}",
        info.0
    );
    let mark = info.field("AdminComment").unwrap_or_default();
    assert!(mark.contains(" failed-open="), "{mark}");
    assert_eq!(mark.matches("open=").count(), 1, "{mark}");
    assert!(
        bed.job(per_job)
            .unwrap()
            .gres_field("TresPerJob")
            .is_some_and(|t| t.contains("gpu:3")),
        "{}",
        detail(bed, per_job)
    );
    let (_, status, _) = hadar_config(bed, &serve.config, &["status"]);
    assert!(
        status.contains("FAILED OPEN") && status.contains("no round completed for"),
        "{status}"
    );
    // A later run finds nothing more to do.
    assert_eq!(fail_open(bed, &serve.config), (true, vec![]));

    // Slurm runs them on the GPUs they asked for; every job completes once.
    wait_state(bed, typed, &["RUNNING", "COMPLETED"], 60);
    let alloc = allocation(bed, typed);
    assert!(
        alloc.iter().all(|p| p.1 == "k80") && alloc.iter().map(|p| p.2).sum::<u32>() == 2,
        "{alloc:?}"
    );
    wait_state(bed, per_job, &["RUNNING", "COMPLETED"], 60);
    let alloc = allocation(bed, per_job);
    assert!(
        alloc.is_empty() || alloc.iter().map(|p| p.2).sum::<u32>() == 3,
        "{alloc:?}"
    );
    for id in [running, typed, per_job] {
        finish_once(bed, id, steps);
    }
    let info = wait_completed(bed, unmanaged, 60);
    assert_eq!(
        info.field("AdminComment").unwrap_or_default(),
        "",
        "untouched"
    );
}

fn daemon_back_takes_back_waiting_jobs_and_adopts_running_ones(bed: &mut Testbed) {
    // Every GPU held by jobs Slurm runs on its own.
    let fillers = occupy(
        bed,
        &[
            ("n1", "gpu:v100:4"),
            ("n2", "gpu:p100:4"),
            ("n3", "gpu:k80:4"),
            ("n4", "gpu:v100:2"),
            ("n4", "gpu:k80:2"),
        ],
    );
    let mut serve = start_daemon(bed, "back");
    let steps = 3000;
    // Known to the daemon, waiting for GPUs, when it dies.
    let known = train(bed, "--gres=gpu:2", steps);
    // `hadar status --config` (not `Serve::hadar`, which fails the test while the daemon
    // has not created its database yet), read as JSON: the table's layout is not an interface.
    wait_until("the daemon knows the job", 30, || {
        let (_, out, _) = hadar_config(bed, &serve.config, &["status", "--format", "json"]);
        serde_json::from_str::<serde_json::Value>(&out).is_ok_and(|v| {
            v["jobs"]
                .as_array()
                .is_some_and(|jobs| jobs.iter().any(|j| j["id"].as_u64() == Some(known.into())))
        })
    });
    serve.kill();
    let died = Instant::now();
    let unseen = train(bed, "--gres=gpu:4", steps);
    std::thread::sleep(Duration::from_secs(FAIL_OPEN_AFTER + 1).saturating_sub(died.elapsed()));
    let (failed, mut released) = fail_open(bed, &serve.config);
    released.sort();
    assert!(failed);
    assert_eq!(released, vec![u64::from(known), u64::from(unseen)]);
    // Four K80s free: Slurm starts one of the two; the other cannot fit and waits.
    bed.client("scancel", &[&fillers[2].to_string()]).unwrap();
    wait_until("Slurm starts one failed-open job", 60, || {
        [known, unseen]
            .iter()
            .any(|id| field(bed, *id, "JobState") == "RUNNING")
    });
    std::thread::sleep(Duration::from_secs(2));
    let (started, waiting) = if field(bed, known, "JobState") == "RUNNING" {
        (known, unseen)
    } else {
        (unseen, known)
    };
    assert_eq!(
        field(bed, waiting, "JobState"),
        "PENDING",
        "{}",
        detail(bed, waiting)
    );

    // The daemon comes back: the waiting job is held again without its GPUs, the running one
    // is adopted where it runs.
    serve = Serve::spawn(bed, serve.config.clone(), serve.state.clone());
    wait_until("the waiting job is held again", 30, || {
        field(bed, waiting, "Reason").starts_with("JobHeld")
            && !field(bed, waiting, "AdminComment").contains("open=")
    });
    let info = bed.job(waiting).unwrap();
    assert!(
        !info
            .gres_field("TresPerNode")
            .is_some_and(|t| t.contains("gpu")),
        "its GPU request is stripped again: {}",
        info.0
    );
    wait_until("the running job is unmarked", 10, || {
        !field(bed, started, "AdminComment").contains("open=")
    });
    assert_eq!(field(bed, started, "JobState"), "RUNNING");
    wait_until("the cluster is no longer failed open", 20, || {
        let (_, s, _) = hadar_config(bed, &serve.config, &["status"]);
        !s.contains("FAILED OPEN") && !s.contains("failed open")
    });
    let status = serve.hadar(&["status", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let phase = |id: u32| {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"].as_u64() == Some(u64::from(id)))
            .map(|j| j["phase"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert_eq!(phase(started), "running", "{status}");
    assert_eq!(phase(waiting), "waiting", "{status}");
    // The action log: one take-back, one adoption, and no start or requeue of the adopted job.
    let store = hadar_store::Store::open_read_only(&serve.state).unwrap();
    let intents = store.all_intents().unwrap();
    let of = |id: u32| -> Vec<String> {
        intents
            .iter()
            .filter(|i| i.job == u64::from(id))
            .map(|i| {
                let outcome = i.outcome.as_ref().map(ToString::to_string);
                format!("{}:{}", i.action, outcome.as_deref().unwrap_or("open"))
            })
            .collect()
    };
    assert_eq!(of(started), vec!["adopt:ok"], "{intents:?}");
    assert_eq!(
        of(waiting).first().map(String::as_str),
        Some("take-back:ok"),
        "{intents:?}"
    );

    // GPUs free up: the daemon places the waiting job; each job completes once.
    for f in &fillers {
        let _ = bed.client("scancel", &[&f.to_string()]);
    }
    for id in [started, waiting] {
        finish_once(bed, id, steps);
    }
    drop(serve);
}

/// The lease's holder as `hadar status` shows it, if one leads.
/// The lease's holder as `hadar status` shows it; `None` also while the first daemon is still
/// creating the state database (status then fails, saying so).
fn leader(serve: &Serve) -> Option<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["status", "--state"])
        .arg(&serve.state)
        .output()
        .expect("run hadar status");
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no hadar tables yet"), "hadar status: {err}");
        return None;
    }
    let status = String::from_utf8_lossy(&out.stdout);
    let line = status.lines().find(|l| l.starts_with("leader: "))?;
    let holder = line.strip_prefix("leader: ")?.split_whitespace().next()?;
    (holder != "none;").then(|| holder.to_string())
}

fn standby_leads_within_the_bound_after_the_leader_is_killed(bed: &mut Testbed) {
    let mut first = start_daemon(bed, "leader");
    let state = first.state.clone();
    wait_until("the first daemon leads", 20, || {
        state.exists() && leader(&first).is_some()
    });
    let first_holder = leader(&first).unwrap();
    // The standby: same state database, its own config and notice socket, and a host name
    // of its own (it cannot see whether the leader's process runs; it waits out the lease).
    let (config, _) = configure(bed, "standby", &state, "hadar-standby.sock");
    let mut second = Serve::spawn_on_host(bed, config, state.clone(), "standby-host");
    let steps = 3000;
    let mut jobs: Vec<u32> = (0..6).map(|_| train(bed, "--gpus=2", steps)).collect();
    wait_until("the leader starts jobs", 30, || {
        jobs.iter()
            .any(|id| field(bed, *id, "JobState") == "RUNNING")
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        leader(&second),
        Some(first_holder.clone()),
        "the standby did not take over"
    );
    first.kill();
    let killed = Instant::now();
    jobs.extend((0..2).map(|_| train(bed, "--gpus=2", steps)));
    // Bound: the lease, the skew allowed, one standby round, and slack for this shared machine.
    let bound = LEASE_SECONDS + 1 + 2 + 6;
    wait_until("the standby leads", bound, || {
        leader(&second).is_some_and(|h| h != first_holder)
    });
    let took_over = killed.elapsed().as_secs_f64();
    assert!(
        took_over >= (LEASE_SECONDS - 4) as f64,
        "took over {took_over:.1} s after the kill, before the lease could have expired"
    );
    println!("    the standby leads {took_over:.1} s after the leader was killed");
    for id in &jobs {
        finish_once(bed, *id, steps);
    }
    // The action log: every intent names its daemon; all of the first daemon's come before
    // any of the second's (never both acting), and each job was started once.
    let store = hadar_store::Store::open_read_only(&state).unwrap();
    let intents = store.all_intents().unwrap();
    assert!(intents.iter().all(|i| i.holder.is_some()), "{intents:?}");
    let second_holder = leader(&second).unwrap();
    let ids_by = |holder: &str| -> Vec<i64> {
        intents
            .iter()
            .filter(|i| i.holder.as_deref() == Some(holder))
            .map(|i| i.id)
            .collect()
    };
    let (by_first, by_second) = (ids_by(&first_holder), ids_by(&second_holder));
    let last_first = *by_first.iter().max().expect("the first daemon acted");
    let first_second = *by_second
        .iter()
        .min()
        .expect("the standby acted after taking over");
    assert!(last_first < first_second, "{intents:?}");
    assert_eq!(
        by_first.len() + by_second.len(),
        intents.len(),
        "{intents:?}"
    );
    // Each job started once (a start cut short by the kill is closed as interrupted, and
    // then taken as done, not repeated).
    for id in &jobs {
        let starts: Vec<String> = intents
            .iter()
            .filter(|i| i.job == u64::from(*id) && i.action == hadar_store::IntentKind::Start)
            .filter_map(|i| i.outcome.as_ref().map(ToString::to_string))
            .collect();
        assert!(
            starts.iter().filter(|o| *o == "ok").count() <= 1
                && starts
                    .iter()
                    .filter(|o| *o == "ok" || *o == "interrupted")
                    .count()
                    == 1,
            "job {id}: {starts:?}"
        );
    }
    // A daemon restarted on the standby's host after it died (as systemd's `Restart=` does)
    // sees that no process runs under the holder's id there and leads at once.
    let (config, _) = configure(bed, "standby", &state, "hadar-standby.sock");
    second.kill();
    let killed = Instant::now();
    let third = Serve::spawn_on_host(bed, config, state.clone(), "standby-host");
    wait_until("the restarted daemon leads", bound, || {
        leader(&third).is_some_and(|h| h != second_holder)
    });
    let took_over = killed.elapsed().as_secs_f64();
    assert!(
        took_over < (LEASE_SECONDS - 4) as f64,
        "a daemon on the dead holder's host waited {took_over:.1} s, as for a live one"
    );
    println!(
        "    a daemon restarted on the dead leader's host leads {took_over:.1} s after the kill"
    );
}

fn a_held_array_fails_open_whole_and_slurm_runs_it(bed: &mut Testbed) {
    let mut serve = start_daemon(bed, "array");
    wait_until("a heartbeat", 10, || heartbeat(&serve).exists());
    serve.kill();
    let died = Instant::now();
    // Submitted while the daemon is dead: the whole array is one held record.
    let id = submit(
        bed,
        &["--gpus=1", "--array=0-3%2", &output_args(bed)],
        "#!/bin/sh\n#HADAR steps=10\nsleep 1\n",
    );
    assert!(field(bed, id, "Reason").starts_with("JobHeld"));
    std::thread::sleep(Duration::from_secs(FAIL_OPEN_AFTER + 1).saturating_sub(died.elapsed()));
    let (failed, released) = fail_open(bed, &serve.config);
    assert!(failed, "the daemon is dead");
    assert_eq!(released, vec![u64::from(id)], "the array's record, once");
    // Slurm runs every element with the GPU its user asked for, under its own throttle.
    let mut text = String::new();
    wait_until("the array's elements complete", 120, || {
        text = bed
            .client("scontrol", &["show", "job", &id.to_string()])
            .unwrap_or_default();
        text.matches("JobState=COMPLETED").count() == 4
    });
    // Each element ran with its user's request given back (this testbed has no accounting,
    // so AllocTRES lists no GPUs).
    let with_gpu = text
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("TresPerJob=") && l.ends_with("gpu:1"))
        .count();
    assert_eq!(with_gpu, 4, "{text}");
    assert_eq!(text.matches("failed-open=").count(), 4, "{text}");
}
