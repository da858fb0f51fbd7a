//! `hadar serve` against a real Slurm: one test cluster (the shared harness: munge,
//! slurmctld with the job_submit/hadar plugin, four slurmd with fake V100/P100/K80 GPUs) for
//! this whole file; each scenario starts its own daemon (the real `hadar` binary) with its
//! own state database, submits jobs that run `hadar emulate` (time-scaled training that
//! reads its own allocation, reports progress, checkpoints and resumes), and checks what
//! Slurm shows. `harness = false`: arguments are name filters, `--skip NAME`, `--list`.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Scenario, Testbed, run_scenarios};
use serve::*;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

const SCENARIOS: &[Scenario] = &[
    (
        "two_gpu_job_runs_where_the_plan_says",
        two_gpu_job_runs_where_the_plan_says,
    ),
    (
        "one_gpu_jobs_on_a_mixed_node_run_on_the_types_planned",
        one_gpu_jobs_on_a_mixed_node_run_on_the_types_planned,
    ),
    (
        "mixed_v100_k80_job_runs_at_the_slower_rate",
        mixed_v100_k80_job_runs_at_the_slower_rate,
    ),
    (
        "preempted_job_checkpoints_resumes_and_completes_exactly",
        preempted_job_checkpoints_resumes_and_completes_exactly,
    ),
    (
        "killed_daemon_restarts_and_every_job_completes_once",
        killed_daemon_restarts_and_every_job_completes_once,
    ),
    (
        "status_and_explain_read_the_daemons_state",
        status_and_explain_read_the_daemons_state,
    ),
    (
        "gavel_and_tiresias_served_run_every_job_once",
        gavel_and_tiresias_served_run_every_job_once,
    ),
];

fn main() -> ExitCode {
    let options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-testbed"));
    run_scenarios(SCENARIOS, options, wait_queue_empty)
}

// ----- scenarios -----

fn two_gpu_job_runs_where_the_plan_says(bed: &mut Testbed) {
    let serve = Serve::start(bed, "placed");
    let steps = 4000;
    let id = submit(
        bed,
        &["--gpus=2", &output_args(bed)],
        &script("resnet50-b64", steps, ""),
    );
    wait_state(bed, id, &["RUNNING", "COMPLETED"], 30);
    let alloc = allocation(bed, id);
    assert_eq!(
        alloc,
        planned_parts(&serve, id),
        "scontrol -d show job: {}",
        detail(bed, id)
    );
    assert_eq!(alloc.iter().map(|p| p.2).sum::<u32>(), 2);
    // Nothing else runs, so Hadar gives ResNet-50 its fastest type.
    assert!(alloc.iter().all(|p| p.1 == "v100"), "{alloc:?}");
    let info = wait_state(bed, id, &["COMPLETED", "FAILED", "CANCELLED"], 60);
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        info.0
    );
    assert!(
        output(bed, id).contains(&format!("completed {steps} steps")),
        "{}",
        output(bed, id)
    );
}

/// The GPUs hadar's last decision for job `id` placed it on (`hadar explain`): sorted (node,
/// type, count); none when it waits.
fn planned_parts(serve: &Serve, id: u32) -> Vec<(String, String, u32)> {
    let explained: serde_json::Value =
        serde_json::from_str(&serve.hadar(&["explain", &id.to_string(), "--format", "json"]))
            .unwrap();
    let planned = &explained["decision"]["placement"];
    let mut parts: Vec<(String, String, u32)> = Vec::new();
    for node in planned.as_array().map_or(&[][..], Vec::as_slice) {
        for g in node[1].as_array().unwrap() {
            parts.push((
                node[0].as_str().unwrap().into(),
                g[0].as_str().unwrap().into(),
                g[1].as_u64().unwrap() as u32,
            ));
        }
    }
    parts.sort();
    parts
}

/// Fills n1-n3 with jobs hadar does not manage, leaving only n4's 2 V100 + 2 K80 free.
fn occupy_all_but_n4(bed: &Testbed) -> Vec<u32> {
    occupy(
        bed,
        &[
            ("n1", "gpu:v100:4"),
            ("n2", "gpu:p100:4"),
            ("n3", "gpu:k80:4"),
        ],
    )
}

/// One-GPU jobs released together onto n4 (2 V100 + 2 K80), the only free GPUs. On 24.11
/// and later each gets a request typed as planned, so each runs on the type hadar planned for
/// it; with typeless requests Slurm chose the types itself, in its own start order, and gave a
/// job planned on a V100 a K80 (docs/prediction.md, seed 1). On 22.05 the requests stay
/// typeless (a typed one would hold a job to its type for good), so there only the nodes and
/// counts are checked and the types printed.
fn one_gpu_jobs_on_a_mixed_node_run_on_the_types_planned(bed: &mut Testbed) {
    let fillers = occupy_all_but_n4(bed);
    // Submitted while no daemon runs: the plugin holds them, and the daemon's first round
    // plans and releases all four at once. Two short jobs (about a minute on a K80) run on the
    // K80s at once rather than wait for a V100 held by one of two long jobs; they come first,
    // so Slurm, starting the four in its own order, meets them first.
    let jobs: Vec<u32> = [
        ("a3c", 500_000),
        ("a3c", 500_000),
        ("lm-b20", 100_000_000),
        ("transformer-b64", 100_000_000),
    ]
    .iter()
    .map(|(kind, steps)| {
        submit(
            bed,
            &["--gpus=1", &output_args(bed)],
            &script(kind, *steps, ""),
        )
    })
    .collect();
    // The log is shared by the scenarios: only what this daemon writes counts.
    let log_before =
        std::fs::read_to_string(bed.path("log/hadar-serve.log")).map_or(0, |l| l.len());
    let serve = Serve::start(bed, "mixed-node");
    let running = |id: u32| {
        bed.client("squeue", &["-h", "-j", &id.to_string(), "-o", "%T"])
            .is_ok_and(|s| s.trim() == "RUNNING")
    };
    wait_until("the daemon's first round is recorded", 30, || {
        std::fs::read_to_string(bed.path("log/hadar-serve.log")).is_ok_and(|l| {
            l.get(log_before..)
                .is_some_and(|new| new.contains("round done round=1 "))
        })
    });
    wait_until("the jobs hadar placed run, and only those", 30, || {
        jobs.iter()
            .all(|id| planned_parts(&serve, *id).is_empty() != running(*id))
            && jobs.iter().any(|id| running(*id))
    });
    let typed = hadar_slurm_testbed::slurm_release()
        .and_then(|t| hadar_slurm::SlurmRelease::parse(&t))
        .is_some_and(|r| r.retypes_pending_jobs());
    let mut types_planned = Vec::new();
    for id in jobs.iter().filter(|id| running(**id)) {
        let alloc = allocation(bed, *id);
        let planned = planned_parts(&serve, *id);
        println!("job {id}: planned {planned:?}, Slurm gave {alloc:?}");
        if typed {
            assert_eq!(alloc, planned, "job {id}: {}", detail(bed, *id));
        } else {
            let place = |v: &[(String, String, u32)]| -> Vec<(String, u32)> {
                v.iter().map(|(n, _, c)| (n.clone(), *c)).collect()
            };
            assert_eq!(
                place(&alloc),
                place(&planned),
                "job {id}: {}",
                detail(bed, *id)
            );
        }
        types_planned.extend(planned.into_iter().map(|(_, t, _)| t));
    }
    // The case in question happened: jobs planned on both types of n4 at once.
    assert!(
        types_planned.iter().any(|t| t == "k80") && types_planned.iter().any(|t| t == "v100"),
        "{types_planned:?}"
    );
    for id in jobs.iter().chain(&fillers) {
        let _ = bed.client("scancel", &[&id.to_string()]);
    }
}

fn mixed_v100_k80_job_runs_at_the_slower_rate(bed: &mut Testbed) {
    let fillers = occupy_all_but_n4(bed);
    let _serve = Serve::start(bed, "mixed");
    let steps = 10_000;
    let id = submit(
        bed,
        &["--gpus=4", &output_args(bed)],
        &script("resnet18-b64", steps, ""),
    );
    wait_state(bed, id, &["RUNNING", "COMPLETED"], 30);
    let alloc = allocation(bed, id);
    assert_eq!(
        alloc,
        vec![
            ("n4".to_string(), "k80".to_string(), 2),
            ("n4".to_string(), "v100".to_string(), 2)
        ],
        "{}",
        detail(bed, id)
    );
    let info = wait_state(bed, id, &["COMPLETED", "FAILED", "CANCELLED"], 90);
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        info.0
    );
    let out = output(bed, id);
    let k80 = gavel_rate("resnet18-b64", "k80", 4) * TIME_SCALE;
    let v100 = gavel_rate("resnet18-b64", "v100", 4) * TIME_SCALE;
    assert!(k80 < v100);
    let rates = printed_rates(&out);
    assert_eq!(rates.len(), 1, "{out}");
    assert!(
        (rates[0] - k80).abs() < 1e-3 * k80,
        "rate {} should be the K80 rate {k80} (V100: {v100}): {out}",
        rates[0]
    );
    for f in fillers {
        let _ = bed.client("scancel", &[&f.to_string()]);
    }
}

fn preempted_job_checkpoints_resumes_and_completes_exactly(bed: &mut Testbed) {
    let serve = Serve::start(bed, "preempt");
    let steps = 5000;
    let id = submit(
        bed,
        &["--gpus=1", &output_args(bed)],
        &script("a3c", steps, "gpu-types=k80"),
    );
    wait_state(bed, id, &["RUNNING"], 30);
    let first = allocation(bed, id);
    let node = first[0].0.clone();
    assert!(node == "n3" || node == "n4", "{first:?}");
    // Let it make progress, then drain its node: the daemon must checkpoint it, requeue it
    // held and place it on the other K80 node.
    std::thread::sleep(Duration::from_secs(4));
    drain(bed, &node);
    wait_until("the job is requeued", 40, || {
        detail(bed, id).contains("Restarts=1")
    });
    wait_state(bed, id, &["RUNNING", "COMPLETED"], 40);
    let second = allocation(bed, id);
    let info = wait_state(bed, id, &["COMPLETED", "FAILED", "CANCELLED"], 120);
    resume(bed, &node);
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        info.0
    );
    assert_eq!(info.field("Restarts").as_deref(), Some("1"), "{}", info.0);
    if !second.is_empty() {
        assert_ne!(
            second[0].0, node,
            "re-placed off the drained node: {second:?}"
        );
    }
    let out = output(bed, id);
    let ckpt = std::fs::read_to_string(bed.path(&format!("jobs/hadar-checkpoint-{id}"))).unwrap();
    assert_eq!(ckpt.trim(), format!("steps={steps}"));
    let resumed: f64 = out
        .lines()
        .filter_map(|l| l.split("resuming at ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no resume line: {out}"));
    assert!(
        resumed > 0.0 && resumed < steps as f64,
        "resumed from the checkpoint, not from 0 or the end: {out}"
    );
    assert_eq!(
        out.matches(&format!("completed {steps} steps")).count(),
        1,
        "{out}"
    );
    report_shows_the_preemption(bed, &serve, id, &node);
    every_round_replays(&serve);
}

/// `hadar replay --all` on the run's state database: every kept round of the run (placing,
/// checkpointing on a drained node, placing again, finishing) decides the same again from
/// its snapshot.
fn every_round_replays(serve: &Serve) {
    let out = serve.hadar(&["replay", "--all"]);
    let identical = out.lines().filter(|l| l.ends_with(": identical")).count();
    assert!(identical > 1, "more than one round replayed: {out}");
    assert!(
        out.lines()
            .last()
            .is_some_and(|l| l.ends_with("all identical")),
        "{out}"
    );
    eprintln!("{}", out.lines().last().unwrap_or_default());
}

/// `hadar report` on the run's state: the job's row counts its preemption, and its stretches
/// on GPUs are two, on the drained node and then on another, one after the other.
fn report_shows_the_preemption(bed: &Testbed, serve: &Serve, id: u32, drained: &str) {
    let dir = bed.path("report-preempt");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["report", "--state"])
        .arg(&serve.state)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jobs = std::fs::read_to_string(dir.join("jobs.csv")).unwrap();
    let row = jobs
        .lines()
        .find(|l| l.starts_with(&format!("serve,{id},")))
        .unwrap_or_else(|| panic!("a row for job {id}: {jobs}"));
    assert!(row.ends_with(",1"), "one restart counted: {row}");
    let segments = std::fs::read_to_string(dir.join("segments.csv")).unwrap();
    let own: Vec<Vec<&str>> = segments
        .lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|f| f[1] == id.to_string())
        .collect();
    assert_eq!(own.len(), 2, "two stretches: {segments}");
    assert_eq!(own[0][2], drained, "first on the drained node: {segments}");
    assert_ne!(own[1][2], drained, "then elsewhere: {segments}");
    let (first_end, second_start): (f64, f64) =
        (own[0][6].parse().unwrap(), own[1][5].parse().unwrap());
    assert!(first_end <= second_start, "one after the other: {segments}");
    assert!(
        std::fs::metadata(dir.join("timeline-serve.svg"))
            .unwrap()
            .len()
            > 0
    );
}

fn killed_daemon_restarts_and_every_job_completes_once(bed: &mut Testbed) {
    let mut serve = Serve::start(bed, "restart");
    let jobs: Vec<(u32, u64)> = [
        ("resnet18-b64", 2, 40_000u64),
        ("a3c", 1, 5000),
        ("transformer-b64", 2, 10_000),
        ("lm-b20", 1, 30_000),
        ("cyclegan", 1, 1000),
        ("resnet50-b64", 4, 6000),
    ]
    .iter()
    .map(|(t, n, steps)| {
        (
            submit(
                bed,
                &[&format!("--gpus={n}"), &output_args(bed)],
                &script(t, *steps, ""),
            ),
            *steps,
        )
    })
    .collect();
    wait_until("some job runs", 30, || {
        jobs.iter()
            .any(|(id, _)| detail(bed, *id).contains("JobState=RUNNING"))
    });
    serve.restart(bed);
    std::thread::sleep(Duration::from_secs(3));
    serve.restart(bed);
    for (id, steps) in &jobs {
        let info = wait_state(bed, *id, &["COMPLETED", "FAILED", "CANCELLED"], 180);
        assert_eq!(
            info.field("JobState").as_deref(),
            Some("COMPLETED"),
            "{}",
            info.0
        );
        assert_eq!(
            info.field("Restarts").as_deref(),
            Some("0"),
            "started once: {}",
            info.0
        );
        let out = output(bed, *id);
        assert_eq!(
            out.matches("hadar-emulate: job type").count(),
            1,
            "ran once: {out}"
        );
        assert_eq!(
            out.matches(&format!("completed {steps} steps")).count(),
            1,
            "{out}"
        );
    }
    // The daemon notices the last completion at its next round.
    let mut seen = String::new();
    let recorded = poll_until(15, || {
        seen = serve.hadar(&["status", "--all", "--format", "json"]);
        let status: serde_json::Value = serde_json::from_str(&seen).unwrap_or_default();
        let rows = status["jobs"].as_array().cloned().unwrap_or_default();
        rows.len() == jobs.len()
            && rows.iter().all(|j| {
                j["phase"] == "finished" && j["final_state"] == "completed" && j["starts"] == 1
            })
    });
    assert!(
        recorded,
        "the daemon records every job as finished, each started once: not within 15 s\n\
         hadar status: {seen}\nlog: {}",
        daemon_log(bed)
    );
    // Rounds of the three daemons (two of them killed) replay alike.
    every_round_replays(&serve);
}

fn status_and_explain_read_the_daemons_state(bed: &mut Testbed) {
    let fillers = occupy_all_but_n4(bed);
    let serve = Serve::start(bed, "status");
    let runs = submit(
        bed,
        &["--gpus=4", &output_args(bed)],
        &script("resnet18-b64", 100_000, ""),
    );
    let waits = submit(
        bed,
        &["--gpus=2", &output_args(bed)],
        &script("resnet18-b64", 100, "gpu-types=p100"),
    );
    wait_state(bed, runs, &["RUNNING"], 30);
    wait_until("a round after the start", 10, || {
        serve
            .hadar(&["explain", &runs.to_string()])
            .contains("runs on n4")
    });
    let text = serve.hadar(&["status"]);
    assert!(text.contains("policy hadar decided in"), "{text}");
    // Per partition and type by default (n1 and n4 hold the V100s of partition gpu)...
    assert!(
        text.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.starts_with(&["gpu", "v100", "2", "6"]) && l.contains('%')
        }),
        "{text}"
    );
    // ...and node by node, with prices, on asking.
    let nodes = serve.hadar(&["status", "--nodes"]);
    assert!(
        nodes.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.starts_with(&["n4"]) && cells.get(2) == Some(&"k80") && l.contains("0.")
        }),
        "prices listed per node: {nodes}"
    );
    let why = serve.hadar(&["explain", &runs.to_string()]);
    assert!(
        why.contains("runs on n4 (2 x v100, 2 x k80)") && why.contains("slowest"),
        "{why}"
    );
    // The one type it does not use, when the decision shown withheld it, is named as held
    // back for this round (the look-ahead keeps a running job where it is) or by Slurm (its
    // started typed request), never as one the job cannot run on or did not ask for.
    if let Some((_, after)) = why.split_once("p100: no (") {
        assert!(
            after.starts_with("not this round: it stays on the types it runs on")
                || after.starts_with("Slurm holds the started job"),
            "{why}"
        );
    }
    let why = serve.hadar(&["explain", &waits.to_string()]);
    assert!(why.contains("waits"), "{why}");
    // It asked for P100s only: leaving out the other types is its own choice.
    assert!(
        why.contains("v100: no (its gpu-types= leaves it out)"),
        "{why}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&serve.hadar(&["status", "--format", "json"])).unwrap();
    assert!(json["round"]["decision_ms"].as_f64().is_some(), "{json}");
    assert_eq!(json["jobs"].as_array().unwrap().len(), 2, "{json}");
    for f in fillers {
        let _ = bed.client("scancel", &[&f.to_string()]);
    }
}

/// `[sidecar] policy = "gavel"` and `"tiresias"`: the simulator's baselines served through
/// the same passes and enforcement as Hadar. Six jobs asking for 22 GPUs of the cluster's 16
/// make both share the cluster over rounds (Gavel by its time shares, Tiresias by attained
/// service), so jobs are preempted and resumed; every job completes its steps exactly once,
/// and the rounds say which policy decided them.
fn gavel_and_tiresias_served_run_every_job_once(bed: &mut Testbed) {
    for policy in ["gavel", "tiresias"] {
        let serve = Serve::start_configured(
            bed,
            &format!("policy-{policy}"),
            &format!("policy = \"{policy}\"\n"),
            &[],
        );
        let jobs: Vec<(u32, u64)> = [
            ("resnet18-b64", 4, 20_000u64),
            ("a3c", 2, 3000),
            ("transformer-b64", 4, 6000),
            ("lm-b20", 4, 15_000),
            ("cyclegan", 4, 800),
            ("resnet50-b64", 4, 3000),
        ]
        .iter()
        .map(|(t, n, steps)| {
            let args = [&format!("--gpus={n}"), &output_args(bed)[..]];
            (submit(bed, &args, &script(t, *steps, "")), *steps)
        })
        .collect();
        for (id, steps) in &jobs {
            let info = wait_state(bed, *id, &["COMPLETED", "FAILED", "CANCELLED"], 300);
            assert_eq!(
                info.field("JobState").as_deref(),
                Some("COMPLETED"),
                "{policy}: {}\nlog: {}",
                info.0,
                daemon_log(bed)
            );
            let out = output(bed, *id);
            assert_eq!(
                out.matches(&format!("completed {steps} steps")).count(),
                1,
                "{policy}: {out}"
            );
        }
        let status = serve.hadar(&["status"]);
        assert!(
            status.contains(&format!("policy {policy} decided in")),
            "{status}"
        );
        let restarts: u32 = jobs
            .iter()
            .filter_map(|(id, _)| {
                detail(bed, *id)
                    .split("Restarts=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse::<u32>()
                    .ok()
            })
            .sum();
        eprintln!(
            "{policy}: {} jobs completed once each, {restarts} restarts",
            jobs.len()
        );
    }
}
