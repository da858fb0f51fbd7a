//! Shadow mode on a real Slurm: the test cluster of the shared harness (four slurmd with
//! fake V100/P100/K80 GPUs) without the job_submit plugin, so Slurm alone schedules a small
//! workload of GPU jobs of different lengths on mixed types while `hadar serve --shadow`
//! watches. Checked: hadar acted on nothing (every job ran as Slurm placed it, never held,
//! updated or requeued; no intent in the state database; no action in any round), it did
//! record what it would have done, `hadar status` says it is in shadow mode, and
//! `hadar report` lists every job with Slurm's measured JCT and Hadar's predicted JCT beside
//! it (printed). `harness = false`: arguments are name filters, `--skip NAME`, `--list`.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{Options, Plugin, Scenario, Testbed, run_scenarios};
use serve::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SCENARIOS: &[Scenario] = &[(
    "shadow_mode_records_what_hadar_would_do_and_acts_on_nothing",
    shadow_mode_records_what_hadar_would_do_and_acts_on_nothing,
)];

fn main() -> std::process::ExitCode {
    let mut options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shadow-testbed"));
    // Shadow mode runs without the plugin: jobs carry no hadar directive or record.
    options.plugin = Plugin::None;
    run_scenarios(SCENARIOS, options, wait_queue_empty)
}

/// The daemon in shadow mode, as an admin starts it (`hadar serve --shadow`); killed on drop.
struct ShadowServe(Child);

impl Drop for ShadowServe {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_shadow(bed: &Testbed, state: &Path) -> ShadowServe {
    let config = bed.path("etc/serve-shadow.toml");
    let _ = std::fs::remove_file(state);
    let text = format!(
        "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{conf}\"\n\n\
         [sidecar]\nsocket = \"{sock}\"\nstate = \"{state}\"\nround_seconds = 2\nrestart_seconds = 1\n\
         command_timeout_seconds = 10\n",
        conf = bed.path("etc/slurm.conf").display(),
        sock = bed.path("run/hadar-shadow.sock").display(),
        state = state.display(),
    );
    std::fs::write(&config, text).expect("write the daemon's config");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(bed.path("log/hadar-serve.log"))
        .expect("open the daemon's log");
    let child = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["serve", "--shadow", "--config"])
        .arg(&config)
        .env("HADAR_LOG", "info")
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start hadar serve --shadow");
    ShadowServe(child)
}

fn hadar(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .output()
        .expect("run hadar");
    assert!(
        out.status.success(),
        "hadar {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Seconds since 1970 of a `scontrol` time field (the harness runs clients in UTC).
fn unix_time(info: &hadar_slurm_testbed::JobInfo, key: &str) -> f64 {
    let (jobs, _) = hadar_slurm::job::parse_jobs(&info.0);
    let j = jobs.into_iter().next().expect("the job's record");
    let t = match key {
        "SubmitTime" => j.submit_time,
        "EndTime" => j.end_time,
        _ => j.start_time,
    };
    t.unwrap_or_else(|| panic!("no {key} in {}", info.0)) as f64
}

fn shadow_mode_records_what_hadar_would_do_and_acts_on_nothing(bed: &mut Testbed) {
    let state = bed.path("state-shadow.db");
    let _serve = start_shadow(bed, &state);
    wait_until("the shadow daemon completes a round", 60, || {
        state.exists()
            && std::fs::read_to_string(bed.path("log/hadar-serve.log"))
                .unwrap_or_default()
                .contains("shadow round done")
    });
    // Job names are the throughput table's job types, so the report can rate them. The two
    // 4-GPU V100 jobs cannot run at once: Slurm queues the second.
    let workload: [(&str, &str, u32); 5] = [
        ("resnet50", "gpu:v100:4", 12),
        ("transformer", "gpu:k80:2", 6),
        ("resnet18", "gpu:p100:2", 9),
        ("lm", "gpu:v100:1", 4),
        ("resnet50", "gpu:v100:4", 5),
    ];
    let out = output_args(bed);
    let ids: Vec<u32> = workload
        .iter()
        .map(|(name, gres, secs)| {
            submit(
                bed,
                &[
                    "-p",
                    "gpu",
                    &format!("--gres={gres}"),
                    &format!("--job-name={name}"),
                    &out,
                ],
                &format!("#!/bin/sh\nsleep {secs}\n"),
            )
        })
        .collect();
    // A --no-requeue job, which the plugin would leave to Slurm on a site that requeues by
    // default (the test cluster's JobRequeue=1): never shadowed, over the rounds it waits
    // and runs.
    let no_requeue = submit(
        bed,
        &[
            "-p",
            "gpu",
            "--gres=gpu:1",
            "--no-requeue",
            "--job-name=lm",
            &out,
        ],
        "#!/bin/sh\nsleep 6\n",
    );
    let infos: Vec<_> = ids.iter().map(|id| wait_completed(bed, *id, 90)).collect();
    wait_completed(bed, no_requeue, 90);
    // The daemon has seen every job end.
    wait_until("the shadow daemon records every job's end", 30, || {
        let v: serde_json::Value = serde_json::from_str(&hadar(&[
            "status",
            "--all",
            "--format",
            "json",
            "--state",
            state.to_str().unwrap(),
        ]))
        .unwrap();
        ids.iter().all(|id| {
            v["jobs"].as_array().unwrap().iter().any(|j| {
                j["id"].as_u64() == Some(u64::from(*id)) && j["phase"].as_str() == Some("finished")
            })
        })
    });

    let store = hadar_store::Store::open_read_only(&state).unwrap();
    assert_eq!(
        store.job(u64::from(no_requeue)).unwrap(),
        None,
        "a --no-requeue job was shadowed"
    );
    drop(store);
    assert_slurm_alone_scheduled(&ids, &infos, &workload);
    assert_recorded_and_acted_on_nothing(bed, &state, &ids);
    assert_report_rates_every_job(bed, &state, &ids, &infos);
}

/// Slurm alone scheduled every job: as submitted, never held, updated or requeued.
fn assert_slurm_alone_scheduled(
    ids: &[u32],
    infos: &[hadar_slurm_testbed::JobInfo],
    workload: &[(&str, &str, u32)],
) {
    for ((id, info), (_, gres, _)) in ids.iter().zip(infos).zip(workload) {
        assert_eq!(
            info.field("Restarts").as_deref(),
            Some("0"),
            "job {id}: {}",
            info.0
        );
        assert!(
            info.field("AdminComment")
                .is_none_or(|c| c.is_empty() || c == "(null)"),
            "job {id} was marked: {}",
            info.0
        );
        let gpu_type = gres.split(':').nth(1).unwrap();
        let tres = info.field("TresPerNode").unwrap_or_default();
        assert!(
            tres.contains(gpu_type),
            "job {id}'s request changed ({gres} asked): {}",
            info.0
        );
    }
}

/// The store and the log hold what Hadar would have done and no action: no intents, each
/// job's decision, rounds that would have acted; `status` and the fail-open check see a
/// live shadow daemon.
fn assert_recorded_and_acted_on_nothing(bed: &Testbed, state: &Path, ids: &[u32]) {
    let store = hadar_store::Store::open_read_only(state).unwrap();
    assert!(
        store.all_intents().unwrap().is_empty(),
        "shadow mode wrote intents: {:?}",
        store.all_intents().unwrap()
    );
    let last = store.last_round().unwrap().expect("rounds were recorded");
    assert!(last.policy.contains("shadow"), "{last:?}");
    // What Hadar would have done is recorded: each job's last decision, and per round the
    // starts, moves and preemptions it would have made (some, on this workload).
    for id in ids {
        let d = store
            .decision(u64::from(*id))
            .unwrap()
            .unwrap_or_else(|| panic!("no decision recorded for job {id}"));
        assert!(d.text.starts_with("(shadow) hadar would"), "{d:?}");
    }
    let log = std::fs::read_to_string(bed.path("log/hadar-serve.log")).unwrap();
    assert!(log.contains("SHADOW mode"), "{}", daemon_log(bed));
    for acted in ["round done round=", "action=", "releasing"] {
        assert!(
            !log.contains(acted),
            "the log shows an action ({acted}): {}",
            daemon_log(bed)
        );
    }
    let would: u64 = log
        .lines()
        .filter(|l| l.contains("shadow round done"))
        .flat_map(|l| l.split_whitespace())
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            ["would_start", "would_move", "would_preempt"]
                .contains(&k)
                .then(|| v.parse::<u64>().ok())?
        })
        .sum();
    assert!(
        would > 0,
        "no round recorded an action Hadar would have taken: {}",
        daemon_log(bed)
    );
    let status = hadar(&["status", "--state", state.to_str().unwrap()]);
    assert!(status.contains("mode: SHADOW"), "{status}");
    // It beats as an acting daemon does: the fail-open check finds it alive.
    let health = hadar(&[
        "fail-open",
        "--dry-run",
        "--config",
        bed.path("etc/serve-shadow.toml").to_str().unwrap(),
    ]);
    assert!(health.contains("the daemon is alive"), "{health}");
}

/// The report: every job, Slurm's JCT (as scontrol shows it) and a predicted one.
fn assert_report_rates_every_job(
    bed: &Testbed,
    state: &Path,
    ids: &[u32],
    infos: &[hadar_slurm_testbed::JobInfo],
) {
    let dir = bed.path("shadow-report");
    let printed = hadar(&[
        "report",
        "--state",
        state.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
    ]);
    println!("{printed}");
    let csv = std::fs::read_to_string(dir.join("shadow.csv")).unwrap();
    let rows: Vec<Vec<String>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    for (id, info) in ids.iter().zip(infos) {
        let row = rows
            .iter()
            .find(|r| r[0] == id.to_string())
            .unwrap_or_else(|| panic!("job {id} is not in shadow.csv:\n{csv}"));
        let slurm: f64 = row[5].parse().unwrap();
        let predicted: f64 = row[6]
            .parse()
            .unwrap_or_else(|_| panic!("no predicted JCT for job {id}:\n{csv}"));
        let measured = unix_time(info, "EndTime") - unix_time(info, "SubmitTime");
        assert!(
            (slurm - measured).abs() <= 2.0,
            "job {id}: Slurm's JCT {slurm} in the report, {measured} in scontrol"
        );
        assert!(predicted > 0.0, "job {id}: predicted JCT {predicted}");
        assert!(
            printed
                .lines()
                .any(|l| l.starts_with(&id.to_string()) && l.contains(&format!("{slurm:.1}"))),
            "job {id} is not printed with its JCT:\n{printed}"
        );
    }
    for what in ["makespan", "mean_jct"] {
        let r = rows.iter().find(|r| r[0] == what).expect(what);
        assert!(r[5].parse::<f64>().unwrap() > 0.0 && r[6].parse::<f64>().unwrap() > 0.0);
    }
}
