//! The `job_submit/hadar` plugin against a real Slurm: one test cluster (munge, slurmctld,
//! four slurmd with fake V100/P100/K80 GPUs) is started for this whole file, the plugin is
//! built and installed with the documented `slurm-plugin/install.sh`, every scenario below
//! runs against it in order, and the cluster is stopped at the end, also when a scenario
//! fails (the harness's `Drop`). This file has its own `main` (`harness = false`) for that
//! reason. Arguments: name filters (a scenario runs if its name contains one of them),
//! `--skip NAME`, `--list`; other libtest flags are accepted and ignored.

use hadar_request::{GpuCount, Notice, Record, Scope};
use hadar_slurm_testbed::{
    DEFAULT_HADAR_TOML, JobInfo, Options, Scenario, StuckSidecar, Submitted, Testbed, built_plugin,
    run_scenarios,
};
use std::io::Read;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// In the order they run; the configuration-changing ones last.
const SCENARIOS: &[Scenario] = &[
    (
        "plugin_is_installed_and_loaded",
        plugin_is_installed_and_loaded,
    ),
    (
        "managed_gres_job_is_held_and_recorded",
        managed_gres_job_is_held_and_recorded,
    ),
    (
        "ordinary_users_jobs_are_held_and_recorded_too",
        ordinary_users_jobs_are_held_and_recorded_too,
    ),
    (
        "directives_and_typed_gpus_are_recorded",
        directives_and_typed_gpus_are_recorded,
    ),
    (
        "comment_opts_in_and_hadar_off_opts_out",
        comment_opts_in_and_hadar_off_opts_out,
    ),
    (
        "unmanaged_job_runs_as_slurm_would",
        unmanaged_job_runs_as_slurm_would,
    ),
    (
        "bad_requests_are_rejected_with_their_message",
        bad_requests_are_rejected_with_their_message,
    ),
    (
        "sidecar_down_submissions_still_held_and_recorded",
        sidecar_down_submissions_still_held_and_recorded,
    ),
    (
        "listening_sidecar_receives_the_notice",
        listening_sidecar_receives_the_notice,
    ),
    (
        "stuck_sidecar_costs_at_most_the_deadline",
        stuck_sidecar_costs_at_most_the_deadline,
    ),
    (
        "het_job_components_are_handled_per_component",
        het_job_components_are_handled_per_component,
    ),
    (
        "interactive_allocations_are_left_to_slurm",
        interactive_allocations_are_left_to_slurm,
    ),
    (
        "install_refuses_a_version_mismatch",
        install_refuses_a_version_mismatch,
    ),
    (
        "uninstall_refuses_while_slurm_lists_the_plugin",
        uninstall_refuses_while_slurm_lists_the_plugin,
    ),
    (
        "reconfigure_rereads_the_config",
        reconfigure_rereads_the_config,
    ),
    (
        "broken_config_passes_jobs_through",
        broken_config_passes_jobs_through,
    ),
];

fn main() -> ExitCode {
    let options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("slurm-testbed"));
    run_scenarios(SCENARIOS, options, |_| {})
}

// ----- helpers -----

fn submit_ok(bed: &Testbed, args: &[&str], script: Option<&str>) -> u32 {
    let sub = bed.sbatch(args, script);
    assert!(sub.ok, "sbatch {args:?} failed: {}", sub.stderr);
    sub.job_id
        .unwrap_or_else(|| panic!("sbatch {args:?} printed no job id: {}", sub.stdout))
}

fn job(bed: &Testbed, id: u32) -> JobInfo {
    bed.job(id)
        .unwrap_or_else(|e| panic!("scontrol show job {id}: {e}"))
}

/// Asserts the job is held by the plugin and returns its decoded record.
fn held_record(bed: &Testbed, id: u32) -> Record {
    let info = job(bed, id);
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("PENDING"),
        "{}",
        info.0
    );
    assert_eq!(info.field("Priority").as_deref(), Some("0"), "{}", info.0);
    assert!(
        info.field("Reason")
            .is_some_and(|r| r.starts_with("JobHeld")),
        "{}",
        info.0
    );
    assert_eq!(
        info.field("TresPerNode"),
        None,
        "the GPU request must be stripped: {}",
        info.0
    );
    assert_eq!(
        info.field("TresPerJob"),
        None,
        "the GPU request must be stripped: {}",
        info.0
    );
    let text = info
        .field("AdminComment")
        .unwrap_or_else(|| panic!("no AdminComment on job {id}: {}", info.0));
    Record::decode(&text).unwrap_or_else(|e| panic!("job {id} AdminComment `{text}`: {e}"))
}

fn untyped(n: u32) -> Vec<GpuCount> {
    vec![GpuCount {
        gpu_type: None,
        count: n,
    }]
}

fn typed(list: &[(&str, u32)]) -> Vec<GpuCount> {
    list.iter()
        .map(|(t, n)| GpuCount {
            gpu_type: Some(t.to_string()),
            count: *n,
        })
        .collect()
}

/// The job's standard output, once it has completed.
fn completed_output(bed: &Testbed, id: u32) -> (JobInfo, String) {
    let info = bed
        .wait_job(
            id,
            &["COMPLETED", "FAILED", "CANCELLED"],
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        info.0
    );
    let out = std::fs::read_to_string(bed.path(&format!("jobs/out-{id}.txt"))).unwrap_or_default();
    (info, out)
}

fn rejected(bed: &Testbed, args: &[&str], script: Option<&str>) -> Submitted {
    let sub = bed.sbatch(args, script);
    assert!(
        !sub.ok,
        "sbatch {args:?} was accepted but should be rejected: {}",
        sub.stdout
    );
    sub
}

// ----- scenarios -----

fn plugin_is_installed_and_loaded(bed: &mut Testbed) {
    assert!(
        bed.install_output.contains("installed "),
        "install.sh output: {}",
        bed.install_output
    );
    assert!(
        bed.install_output.contains("JobSubmitPlugins=hadar"),
        "install.sh output: {}",
        bed.install_output
    );
    assert!(bed.path("plugins/job_submit_hadar.so").is_file());
    let config = bed.client("scontrol", &["show", "config"]).unwrap();
    let line = config
        .lines()
        .find(|l| l.starts_with("JobSubmitPlugins"))
        .expect("JobSubmitPlugins line");
    assert_eq!(
        line.split('=').nth(1).map(str::trim),
        Some("hadar"),
        "{line}"
    );
    let log = bed.controller_log();
    assert!(
        log.contains("hadar: init: loaded"),
        "slurmctld log lacks the plugin's init line:\n{log}"
    );
    assert!(log.contains("GPU types: k80, p100, v100"), "{log}");
}

fn managed_gres_job_is_held_and_recorded(bed: &mut Testbed) {
    let id = submit_ok(bed, &["--gres=gpu:2", "--wrap", "sleep 1"], None);
    let record = held_record(bed, id);
    assert_eq!(record.gpus.scope, Scope::PerNode);
    assert_eq!(record.gpus.counts, untyped(2));
    assert_eq!(record.nodes, None);
    assert_eq!(record.het_offset, None);
    assert_eq!(
        job(bed, id).field("AdminComment").as_deref(),
        Some("hadar:v1 gpus-per-node=2")
    );
}

fn ordinary_users_jobs_are_held_and_recorded_too(bed: &mut Testbed) {
    // Slurm checks who may set a priority or an admin comment before the plugin runs, so the
    // plugin can hold and record the job of a user who could not do either.
    let out = bed
        .command("runuser")
        .args([
            "-u",
            "nobody",
            "--",
            "sbatch",
            "--gres=gpu:k80:1",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ])
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .current_dir("/")
        .output()
        .expect("run sbatch as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sbatch as nobody failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id: u32 = stdout
        .trim()
        .strip_prefix("Submitted batch job ")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no job id in `{stdout}`"));
    assert_eq!(held_record(bed, id).gpus.counts, typed(&[("k80", 1)]));
    let info = job(bed, id);
    assert_eq!(
        info.field("UserId").as_deref(),
        Some("nobody(65534)"),
        "{}",
        info.0
    );
    let log = bed.controller_log();
    assert!(
        log.contains("hadar: managed job from uid 65534 held in "),
        "{log}"
    );
}

fn directives_and_typed_gpus_are_recorded(bed: &mut Testbed) {
    let script = "#!/bin/sh\n#SBATCH --job-name=train\n#HADAR type=resnet50 steps=5000\n#HADAR fork=yes gpu-types=v100,k80\necho training\n";
    let id = submit_ok(bed, &["--gpus=v100:3,k80:1"], Some(script));
    let record = held_record(bed, id);
    assert_eq!(record.gpus.scope, Scope::PerJob);
    assert_eq!(record.gpus.counts, typed(&[("v100", 3), ("k80", 1)]));
    assert_eq!(record.directives.job_type.as_deref(), Some("resnet50"));
    assert_eq!(record.directives.steps, Some(5000));
    assert_eq!(record.directives.may_fork, Some(true));
    assert_eq!(
        record.directives.gpu_types,
        Some(vec!["v100".to_string(), "k80".to_string()])
    );

    // A model description for estimates before the job has run, from the comment.
    let id = submit_ok(
        bed,
        &[
            "--comment=hadar: model=params:25.6M,gflops:4.1,batch:64,amp:yes",
            "--gpus=1",
            "--wrap",
            "true",
        ],
        None,
    );
    let model = held_record(bed, id)
        .directives
        .model
        .expect("model= recorded");
    assert_eq!(
        (model.params, model.batch_size, model.mixed_precision),
        (25.6e6, 64, true)
    );

    // Two nodes have two V100s each (n1, n4), so this is satisfiable.
    let id = submit_ok(
        bed,
        &["-N", "2", "--gpus-per-node=v100:2", "--wrap", "true"],
        None,
    );
    let record = held_record(bed, id);
    assert_eq!((record.gpus.scope, record.nodes), (Scope::PerNode, Some(2)));
    assert_eq!(record.gpus.counts, typed(&[("v100", 2)]));
}

fn comment_opts_in_and_hadar_off_opts_out(bed: &mut Testbed) {
    let id = submit_ok(
        bed,
        &[
            "-p",
            "cpu",
            "--comment=hadar: type=bert epochs=3",
            "--gpus=2",
            "--wrap",
            "true",
        ],
        None,
    );
    let record = held_record(bed, id);
    assert_eq!(
        (record.gpus.scope, record.gpus.counts.clone()),
        (Scope::PerJob, untyped(2))
    );
    assert_eq!(
        (
            record.directives.job_type.as_deref(),
            record.directives.epochs
        ),
        (Some("bert"), Some(3))
    );
    // The user's own comment is left as it was.
    assert_eq!(
        job(bed, id).field("Comment").as_deref(),
        Some("hadar: type=bert epochs=3")
    );

    let script = "#!/bin/sh\n#HADAR off\necho CVD=$CUDA_VISIBLE_DEVICES\n";
    let id = submit_ok(
        bed,
        &["--gres=gpu:p100:1", "-o", "out-%j.txt"],
        Some(script),
    );
    let (info, out) = completed_output(bed, id);
    assert_eq!(info.field("AdminComment"), None, "{}", info.0);
    assert_eq!(
        info.gres_field("TresPerNode").as_deref(),
        Some("gres/gpu:p100:1")
    );
    assert_eq!(
        info.field("NodeList").as_deref(),
        Some("n2"),
        "only n2 has P100s: {}",
        info.0
    );
    assert_eq!(out.trim(), "CVD=0");
}

fn unmanaged_job_runs_as_slurm_would(bed: &mut Testbed) {
    let id = submit_ok(
        bed,
        &[
            "-p",
            "cpu",
            "--gres=gpu:k80:2",
            "-w",
            "n3",
            "-o",
            "out-%j.txt",
            "--wrap",
            "echo CVD=$CUDA_VISIBLE_DEVICES",
        ],
        None,
    );
    let (info, out) = completed_output(bed, id);
    assert_eq!(info.field("AdminComment"), None, "{}", info.0);
    assert_eq!(
        info.gres_field("TresPerNode").as_deref(),
        Some("gres/gpu:k80:2")
    );
    assert_ne!(info.field("Priority").as_deref(), Some("0"));
    assert_eq!(out.trim(), "CVD=0,1");
    // A job without GPUs outside the managed partition is equally untouched.
    let id = submit_ok(
        bed,
        &["-p", "cpu", "-o", "out-%j.txt", "--wrap", "echo plain"],
        None,
    );
    let (_, out) = completed_output(bed, id);
    assert_eq!(out.trim(), "plain");
}

fn bad_requests_are_rejected_with_their_message(bed: &mut Testbed) {
    let directive = |line: &str| format!("#!/bin/sh\n{line}\ntrue\n");
    let cases: Vec<(Vec<&str>, Option<String>, &str)> = vec![
        (
            vec!["--gres=gpu:1"],
            Some(directive("#HADAR stepz=100")),
            "sbatch: error: hadar: unknown directive `stepz=100` in #HADAR line 2 of the batch script; known: on, off, type=, throughput=, steps=, epochs=, fork=, gpu-types=, model=, outer=, restart=",
        ),
        (
            vec!["--gres=gpu:1"],
            Some(directive("#HADAR fork=yes outer=nesterov:2:1")),
            "sbatch: error: hadar: malformed value `nesterov:2:1` for `outer` in #HADAR line 2 of the batch script; expected mean, nesterov, or nesterov:LR:MU with LR in (0, 10] and MU in [0, 1), e.g. nesterov:1:0.5",
        ),
        (
            vec!["--gres=gpu:1"],
            Some(directive("#HADAR steps=12k")),
            "sbatch: error: hadar: malformed value `12k` for `steps` in #HADAR line 2 of the batch script; expected a whole number between 1 and 2^53",
        ),
        (
            vec!["--gres=gpu:1"],
            Some(directive("#HADAR model=params:25M,gflops:4")),
            "sbatch: error: hadar: malformed value `params:25M,gflops:4` for `model` in #HADAR line 2 of the batch script; expected params:N,gflops:X,batch:N[,input:BYTES][,layers:N][,amp:yes|no], e.g. params:25.6M,gflops:4.1,batch:64 (N may end in K, M or G)",
        ),
        (
            vec![
                "--gres=gpu:1",
                "--comment=hadar: fork=maybe",
                "--wrap",
                "true",
            ],
            None,
            "sbatch: error: hadar: malformed value `maybe` for `fork` in --comment; expected yes or no",
        ),
        (
            vec!["--gres=gpu:0", "--wrap", "true"],
            None,
            "sbatch: error: hadar: zero GPUs requested in --gres/--gpus-per-node; a Hadar-managed job needs at least 1 GPU (or add `#HADAR off`)",
        ),
        (
            vec!["--gpus=5000", "--wrap", "true"],
            None,
            "sbatch: error: hadar: 5000 GPUs requested in --gpus is more than the limit of 1024; ask for fewer GPUs",
        ),
        (
            vec!["--gres=gpu:a100:1", "--wrap", "true"],
            None,
            "sbatch: error: hadar: GPU type `a100` in --gres/--gpus-per-node does not exist in this cluster; known types: k80, p100, v100",
        ),
        (
            vec!["--gres=gpu:8", "--wrap", "true"],
            None,
            "sbatch: error: hadar: no 1 node(s) in partition gpu have 8 GPUs each (only 0 node(s) do); lower the GPUs per node or the node count",
        ),
        (
            vec!["-N", "3", "--gres=gpu:v100:2", "--wrap", "true"],
            None,
            "sbatch: error: hadar: no 3 node(s) in partition gpu have v100:2 GPUs each (only 2 node(s) do); lower the GPUs per node or the node count",
        ),
        (
            vec!["--gpus=p100:5", "--wrap", "true"],
            None,
            "sbatch: error: hadar: no set of nodes can provide 5 p100 GPUs: partition gpu has 4; ask for at most 4",
        ),
        (
            // Partition `old` spans the K80 nodes n3 and n4 only: two V100s at most.
            vec!["-p", "old", "--gpus=v100:3", "--wrap", "true"],
            None,
            "sbatch: error: hadar: no set of nodes can provide 3 v100 GPUs: partition old has 2; ask for at most 2",
        ),
        (
            vec!["--wrap", "true"],
            None,
            "sbatch: error: hadar: this job is Hadar-managed but requests no GPUs; add --gres=gpu:N or --gpus=N (or `#HADAR off` to opt out)",
        ),
        (
            vec!["--gres=gpu:p100:1"],
            Some(directive("#HADAR gpu-types=v100,k80")),
            "sbatch: error: hadar: GPU type `p100` is requested but not in gpu-types=v100,k80; make them agree",
        ),
    ];
    let mut wrong = Vec::new();
    for (args, script, expected) in &cases {
        let sub = rejected(bed, args, script.as_deref());
        if !sub.stderr.lines().any(|l| l == *expected) {
            wrong.push(format!(
                "sbatch {args:?}:\n  expected: {expected}\n  got:      {}",
                sub.stderr.trim()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "wrong rejection messages:\n{}",
        wrong.join("\n")
    );
}

fn sidecar_down_submissions_still_held_and_recorded(bed: &mut Testbed) {
    let socket = bed.path("run/hadar.sock");
    let _ = std::fs::remove_file(&socket);
    let ids: Vec<u32> = (0..5)
        .map(|_| submit_ok(bed, &["--gres=gpu:v100:1", "--wrap", "true"], None))
        .collect();
    for id in ids {
        assert_eq!(held_record(bed, id).gpus.counts, typed(&[("v100", 1)]));
    }
    assert!(
        bed.controller_log()
            .contains("(sidecar not notified: connect: No such file or directory")
    );
}

fn listening_sidecar_receives_the_notice(bed: &mut Testbed) {
    let socket = bed.path("run/hadar.sock");
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).expect("bind the fake sidecar socket");
    let id = submit_ok(
        bed,
        &[
            "--gres=gpu:k80:3",
            "--comment=hadar: steps=77",
            "--wrap",
            "true",
        ],
        None,
    );
    listener.set_nonblocking(false).unwrap();
    let (mut conn, _) = listener.accept().expect("the plugin connects");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut line = String::new();
    conn.read_to_string(&mut line).expect("read the notice");
    let _ = std::fs::remove_file(&socket);
    let notice = Notice::decode(&line).unwrap_or_else(|e| panic!("notice `{line}`: {e}"));
    assert_eq!(notice.uid, 0);
    assert_eq!(notice.record, held_record(bed, id));
    assert_eq!(notice.record.directives.steps, Some(77));
}

fn stuck_sidecar_costs_at_most_the_deadline(bed: &mut Testbed) {
    let stuck = StuckSidecar::start(&bed.path("run/hadar.sock")).expect("start a stuck sidecar");
    let id = submit_ok(bed, &["--gres=gpu:p100:2", "--wrap", "true"], None);
    drop(stuck);
    assert_eq!(held_record(bed, id).gpus.counts, typed(&[("p100", 2)]));
    let log = bed.controller_log();
    let line = log
        .lines()
        .rfind(|l| l.contains("hadar: managed job from uid 0 held in "))
        .expect("the plugin logs the held job");
    assert!(
        line.ends_with("(sidecar not notified: deadline passed)"),
        "{line}"
    );
}

fn interactive_allocations_are_left_to_slurm(bed: &mut Testbed) {
    // srun in the managed partition: no batch script, so Slurm allocates the GPU itself.
    let out = bed
        .command("srun")
        .args([
            "--gres=gpu:v100:1",
            "-w",
            "n1",
            "printenv",
            "CUDA_VISIBLE_DEVICES",
        ])
        .output()
        .expect("run srun");
    assert!(
        out.status.success(),
        "srun failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
}

fn install_refuses_a_version_mismatch(bed: &mut Testbed) {
    // Headers claiming the previous maintenance release of the running slurmctld's
    // (22.05.7 beside 22.05.8; 26.05.2 beside 26.05.3).
    let running = hadar_slurm_testbed::slurm_release().expect("slurmctld -V");
    let parts: Vec<u32> = running.split('.').map(|p| p.parse().unwrap()).collect();
    let running_number = (parts[0] << 16) + (parts[1] << 8) + parts[2];
    let older = running_number - 1;
    let include = bed.path("fake-include");
    std::fs::create_dir_all(include.join("slurm")).unwrap();
    std::fs::write(
        include.join("slurm/slurm_version.h"),
        format!("#define SLURM_VERSION_NUMBER 0x{older:06x}\n"),
    )
    .unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("slurm-plugin/install.sh");
    let out = bed
        .command(script.to_str().unwrap())
        .args(["--no-build", "--plugin-dir"])
        .arg(bed.path("plugins-mismatch"))
        .env("SLURM_INCLUDE_DIR", &include)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "are Slurm 0x{older:06x} but the running slurmctld is {running} (0x{running_number:06x})"
        )),
        "{stderr}"
    );
    assert!(!bed.path("plugins-mismatch/job_submit_hadar.so").exists());

    // A library built earlier for another release (its marker says so) is refused too, in one
    // line, before slurmctld would refuse to load it.
    let mut bytes = std::fs::read(built_plugin()).expect("install.sh built the plugin");
    let marker = format!("hadar-built-for-slurm=0x{running_number:06x}");
    let other = format!("hadar-built-for-slurm=0x{older:06x}");
    let at = bytes
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("the built plugin carries its release marker");
    bytes[at..at + other.len()].copy_from_slice(other.as_bytes());
    let stale = bed.path("stale-plugin.so");
    std::fs::write(&stale, &bytes).unwrap();
    let out = bed
        .command(script.to_str().unwrap())
        .args(["--from"])
        .arg(&stale)
        .arg("--plugin-dir")
        .arg(bed.path("plugins-mismatch"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("was built for Slurm")
            && stderr.contains(&format!("0x{older:06x}"))
            && stderr.contains(&running),
        "{stderr}"
    );
    assert!(!bed.path("plugins-mismatch/job_submit_hadar.so").exists());
}

fn het_job_components_are_handled_per_component(bed: &mut Testbed) {
    // Both components managed; the leader's #HADAR lines apply to both.
    let script = "#!/bin/sh\n#HADAR type=gpt2 steps=10\ntrue\n";
    let leader = submit_ok(
        bed,
        &["--gres=gpu:1", ":", "--gres=gpu:k80:2"],
        Some(script),
    );
    let first = held_record(bed, leader);
    let second = held_record(bed, leader + 1);
    assert_eq!(
        (first.het_offset, first.gpus.counts.clone()),
        (Some(0), untyped(1))
    );
    assert_eq!(
        (second.het_offset, second.gpus.counts.clone()),
        (Some(1), typed(&[("k80", 2)]))
    );
    assert_eq!(second.directives.job_type.as_deref(), Some("gpt2"));
    assert_eq!(second.directives.steps, Some(10));

    // A managed component and an unmanaged one in the same het job.
    let leader = submit_ok(
        bed,
        &[
            "-p",
            "gpu",
            "--gres=gpu:1",
            "--wrap",
            "true",
            ":",
            "-p",
            "cpu",
            "--gres=gpu:v100:1",
        ],
        None,
    );
    assert_eq!(held_record(bed, leader).het_offset, Some(0));
    let other = job(bed, leader + 1);
    assert_eq!(other.field("AdminComment"), None, "{}", other.0);
    assert_eq!(
        other.gres_field("TresPerNode").as_deref(),
        Some("gres/gpu:v100:1"),
        "{}",
        other.0
    );

    // A bad second component rejects the whole submission, naming the problem.
    let sub = rejected(
        bed,
        &["--gres=gpu:1", "--wrap", "true", ":", "--gres=gpu:a100:1"],
        None,
    );
    assert!(
        sub.stderr.contains(
            "hadar: GPU type `a100` in --gres/--gpus-per-node does not exist in this cluster"
        ),
        "{}",
        sub.stderr
    );
}

fn uninstall_refuses_while_slurm_lists_the_plugin(bed: &mut Testbed) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("slurm-plugin/install.sh");
    let plugin_dir = bed.path("plugins");
    let out = bed
        .command(script.to_str().unwrap())
        .arg("--uninstall")
        .arg("--plugin-dir")
        .arg(&plugin_dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("slurmctld still lists hadar in JobSubmitPlugins"),
        "{stderr}"
    );
    assert!(
        plugin_dir.join("job_submit_hadar.so").is_file(),
        "the plugin must still be installed"
    );
}

fn reconfigure_rereads_the_config(bed: &mut Testbed) {
    let both = DEFAULT_HADAR_TOML.replace(
        r#"managed_partitions = ["gpu", "old"]"#,
        r#"managed_partitions = ["gpu", "old", "cpu"]"#,
    );
    bed.write_hadar_toml(&both).unwrap();
    bed.reconfigure().unwrap();
    let id = submit_ok(bed, &["-p", "cpu", "--gres=gpu:1", "--wrap", "true"], None);
    assert_eq!(held_record(bed, id).gpus.counts, untyped(1));
    // 22.05 re-reads slurm.conf in place (the plugin notices and reloads); from 23.11 on,
    // `scontrol reconfigure` restarts slurmctld, which loads the plugin afresh (init).
    assert!(
        bed.controller_log().contains("loaded")
            && bed
                .controller_log()
                .contains("managed partitions: [gpu, old, cpu]"),
        "{}",
        bed.controller_log()
    );
    bed.write_hadar_toml(DEFAULT_HADAR_TOML).unwrap();
    bed.reconfigure().unwrap();
    let id = submit_ok(
        bed,
        &["-p", "cpu", "-H", "--gres=gpu:1", "--wrap", "true"],
        None,
    );
    assert_eq!(
        job(bed, id).field("AdminComment"),
        None,
        "cpu is no longer managed"
    );
}

fn broken_config_passes_jobs_through(bed: &mut Testbed) {
    bed.write_hadar_toml("[slurm\nmanaged_partitions = [\"gpu\"]\n")
        .unwrap();
    bed.reconfigure().unwrap();
    let id = submit_ok(
        bed,
        &[
            "--gres=gpu:v100:1",
            "-o",
            "out-%j.txt",
            "--wrap",
            "echo CVD=$CUDA_VISIBLE_DEVICES",
        ],
        None,
    );
    let (info, out) = completed_output(bed, id);
    assert_eq!(info.field("AdminComment"), None, "{}", info.0);
    assert_eq!(
        info.gres_field("TresPerNode").as_deref(),
        Some("gres/gpu:v100:1")
    );
    assert_eq!(out.trim(), "CVD=0");
    let log = bed.controller_log();
    assert!(
        log.contains(": configuration unusable, every job passes through untouched"),
        "{log}"
    );
    bed.write_hadar_toml(DEFAULT_HADAR_TOML).unwrap();
    bed.reconfigure().unwrap();
    let id = submit_ok(bed, &["--gres=gpu:1", "--wrap", "true"], None);
    assert_eq!(
        held_record(bed, id).gpus.counts,
        untyped(1),
        "the repaired config applies again"
    );
}
