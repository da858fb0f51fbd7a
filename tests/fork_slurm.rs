//! Forked (HadarE) jobs under `hadar serve` against a real Slurm: one test cluster for this
//! whole file (the shared harness: munge, slurmctld with the job_submit/hadar plugin, four
//! slurmd with fake V100/P100/K80 GPUs); each scenario starts its own daemon (the real
//! `hadar` binary, `policy = "hadare"`) with its own state database and spool, submits
//! `fork=yes` jobs as an ordinary user (`nobody`), and checks what Slurm and the daemon's
//! Job Tracker show. The training program is a small Perl script that follows the
//! fork-runner contract: it starts from the consolidated checkpoint, does one step per
//! 50 ms within its budget and deadline, and writes a safetensors checkpoint whose tensor
//! `w` is `[start + copy index + 1, start + steps]`, so the averaging can be checked.
//! `harness = false`: arguments are name filters, `--skip NAME`, `--list`.

#[path = "support/serve.rs"]
mod serve;

use hadar_slurm_testbed::{JobInfo, Options, Scenario, Testbed, run_scenarios};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const SCENARIOS: &[Scenario] = &[
    (
        "forked_job_runs_copies_on_several_types_and_completes_exactly",
        forked_job_runs_copies_on_several_types_and_completes_exactly,
    ),
    (
        "failing_forked_job_fails_and_its_afterok_dependent_never_runs",
        failing_forked_job_fails_and_its_afterok_dependent_never_runs,
    ),
    (
        "a_forked_jobs_copies_run_only_where_its_user_allows",
        a_forked_jobs_copies_run_only_where_its_user_allows,
    ),
    (
        "scancel_of_a_forked_job_stops_its_copies",
        scancel_of_a_forked_job_stops_its_copies,
    ),
    (
        "daemon_killed_mid_round_counts_every_round_once",
        daemon_killed_mid_round_counts_every_round_once,
    ),
    (
        "forked_job_completes_with_its_spool_hidden_from_the_daemon",
        forked_job_completes_with_its_spool_hidden_from_the_daemon,
    ),
    (
        "plain_and_forked_jobs_share_the_cluster",
        plain_and_forked_jobs_share_the_cluster,
    ),
    (
        "a_burst_of_forked_jobs_never_books_a_gpu_twice",
        a_burst_of_forked_jobs_never_books_a_gpu_twice,
    ),
    (
        "pytorch_example_trains_forked_with_the_outer_step",
        pytorch_example_trains_forked_with_the_outer_step,
    ),
];

/// The user the forked jobs belong to (never root).
const USER: (u32, u32) = (65534, 65534);

/// Seconds per daemon round.
const ROUND_S: u32 = 8;

fn main() -> ExitCode {
    let options =
        Options::installed(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fork-testbed"));
    run_scenarios(SCENARIOS, options, serve::wait_queue_empty)
}

// ----- the daemon -----

/// A running `hadar serve` with `policy = "hadare"`, killed when dropped.
struct Serve {
    child: Child,
    config: PathBuf,
    state: PathBuf,
    spool: PathBuf,
    /// The daemon runs in its own mount namespace with an empty tmpfs over the spool.
    hidden: bool,
}

impl Serve {
    fn start(bed: &Testbed, name: &str) -> Serve {
        Serve::start_with_rounds(bed, name, ROUND_S, 2)
    }

    /// A daemon with rounds of `round_s` seconds that fails a forked job after
    /// `max_failed_rounds` rounds in a row without a successful copy.
    fn start_with_rounds(bed: &Testbed, name: &str, round_s: u32, max_failed_rounds: u32) -> Serve {
        Serve::start_opts(bed, name, round_s, max_failed_rounds, false)
    }

    /// `hidden`: the daemon cannot see the spool (its own mount namespace, an empty tmpfs
    /// over it), as on a controller host that mounts no user filesystems.
    fn start_opts(
        bed: &Testbed,
        name: &str,
        round_s: u32,
        max_failed_rounds: u32,
        hidden: bool,
    ) -> Serve {
        let config = bed.path(&format!("etc/fork-{name}.toml"));
        let state = bed.path(&format!("state-fork-{name}.db"));
        let spool = bed.path(&format!("spool-{name}"));
        let _ = std::fs::remove_file(&state);
        let _ = std::fs::remove_dir_all(&spool);
        // The spool's root, shared by every user's jobs (sticky, like /tmp): each job's
        // copy job makes its own folder in it, as its user.
        std::fs::create_dir_all(&spool).expect("make the spool");
        std::fs::set_permissions(&spool, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .expect("chmod the spool");
        let text = format!(
            "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{conf}\"\n\n\
             [sidecar]\nsocket = \"{sock}\"\nstate = \"{state}\"\nround_seconds = {round_s}\npreempt_grace_seconds = 1\n\
             restart_seconds = 2\ncommand_timeout_seconds = 10\npolicy = \"hadare\"\n\
             lease_seconds = 12\nmax_clock_skew_seconds = 1\n\n\
             [fork]\nspool = \"{spool}\"\nrunner = \"{runner}\"\ndeadline_margin_seconds = 2\nmax_failed_rounds = {max_failed_rounds}\n",
            conf = bed.path("etc/slurm.conf").display(),
            sock = bed.path("run/hadar.sock").display(),
            state = state.display(),
            spool = spool.display(),
            runner = serve::fork_runner().display(),
        );
        std::fs::write(&config, text).expect("write the daemon's config");
        let child = spawn_in(bed, &config, None, hidden.then_some(spool.as_path()));
        Serve {
            child,
            config,
            state,
            spool,
            hidden,
        }
    }

    /// SIGKILL, as a crash would.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn restart(&mut self, bed: &Testbed) {
        self.kill();
        let hide = self.hidden.then_some(self.spool.as_path());
        self.child = spawn_in(bed, &self.config, None, hide);
    }

    /// Restarts the daemon armed to kill itself at crash point `point`
    /// (`HADAR_FAULT_KILL_AT`), and waits until it has.
    fn restart_and_crash_at(&mut self, bed: &Testbed, point: &str) {
        self.kill();
        self.child = spawn(bed, &self.config, Some(point));
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.child.try_wait().ok().flatten().is_none() {
            assert!(
                Instant::now() < deadline,
                "the daemon did not reach {point}\nlog: {}",
                daemon_log(bed)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            daemon_log(bed).contains(&format!("killing the daemon at {point}")),
            "{}",
            daemon_log(bed)
        );
    }

    fn hadar(&self, args: &[&str]) -> String {
        serve::run_hadar(&self.state, args)
    }

    /// The job's entry of `hadar status --all --format json`.
    fn status(&self, id: u32) -> Value {
        let v: Value =
            serde_json::from_str(&self.hadar(&["status", "--all", "--format", "json"])).unwrap();
        v["jobs"]
            .as_array()
            .and_then(|a| a.iter().find(|j| j["id"] == id).cloned())
            .unwrap_or(Value::Null)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(bed: &Testbed, config: &Path, crash_at: Option<&str>) -> Child {
    spawn_in(bed, config, crash_at, None)
}

/// Starts the daemon; with `hide`, in its own mount namespace with an empty tmpfs mounted
/// over that folder (`unshare --mount`, then `mount -t tmpfs`; unshare and sh exec, so the
/// child's id is the daemon's).
fn spawn_in(bed: &Testbed, config: &Path, crash_at: Option<&str>, hide: Option<&Path>) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(bed.path("log/hadar-serve-fork.log"))
        .expect("open the daemon's log");
    let mut cmd = match hide {
        None => Command::new(env!("CARGO_BIN_EXE_hadar")),
        Some(dir) => {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg("mount -t tmpfs hadar-hidden \"$1\" && shift && exec \"$@\"")
                .arg("sh")
                .arg(dir)
                .arg(env!("CARGO_BIN_EXE_hadar"));
            c
        }
    };
    if let Some(point) = crash_at {
        cmd.env("HADAR_FAULT_KILL_AT", point);
    }
    cmd.args(["serve", "--config"])
        .arg(config)
        .env("HADAR_LOG", "info")
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start hadar serve")
}

// ----- helpers -----

/// Submits a `fork=yes` job as the test user, with more `#HADAR` words when given.
fn submit_forked(bed: &Testbed, steps: u64, gpus: u32, words: &str, program_args: &str) -> u32 {
    submit_forked_with(bed, steps, gpus, words, program_args, &[])
}

/// [`submit_forked`] with more `sbatch` options.
fn submit_forked_with(
    bed: &Testbed,
    steps: u64,
    gpus: u32,
    words: &str,
    program_args: &str,
    options: &[&str],
) -> u32 {
    let dir = serve::fork_jobs_dir(bed);
    let script = format!(
        "#!/bin/sh\n#HADAR fork=yes steps={steps} {words}\nexec {runner} -- /usr/bin/perl {prog} {program_args}\n",
        runner = serve::fork_runner().display(),
        prog = dir.join("train.pl").display(),
    );
    let (uid, gid, output) = (
        format!("--uid={}", USER.0),
        format!("--gid={}", USER.1),
        format!("--output={}/out-%j.txt", dir.display()),
    );
    let gpus = format!("--gpus={gpus}");
    let mut args = vec![
        uid.as_str(),
        gid.as_str(),
        gpus.as_str(),
        output.as_str(),
        "--job-name=forked",
    ];
    args.extend_from_slice(options);
    let sub = bed.sbatch(&args, Some(&script));
    assert!(sub.ok, "sbatch failed: {}", sub.stderr);
    sub.job_id.expect("a job id")
}

/// Submits an unmanaged job that depends on `on` with `afterok`.
fn submit_dependent(bed: &Testbed, on: u32) -> u32 {
    let dir = serve::fork_jobs_dir(bed);
    let sub = bed.sbatch(
        &[
            &format!("--dependency=afterok:{on}"),
            &format!("--output={}/dep-%j.txt", dir.display()),
            "--job-name=dependent",
        ],
        Some("#!/bin/sh\n#HADAR off\necho dependent ran\n"),
    );
    assert!(sub.ok, "sbatch failed: {}", sub.stderr);
    sub.job_id.expect("a job id")
}

fn output(bed: &Testbed, id: u32) -> String {
    std::fs::read_to_string(bed.path(&format!("fork-jobs/out-{id}.txt"))).unwrap_or_default()
}

/// Copy jobs of a logical job in Slurm's queue: `(het leader id, state)` of each component.
fn copy_jobs(bed: &Testbed, id: u32) -> Vec<(u64, String)> {
    let q = bed
        .client("squeue", &["-h", "-o", "%A %j %T"])
        .unwrap_or_default();
    let prefix = format!("hadar-fork-{id}-r");
    q.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (jid, name, state) = (w.next()?, w.next()?, w.next()?);
            name.starts_with(&prefix)
                .then(|| Some((jid.parse().ok()?, state.to_string())))?
        })
        .collect()
}

fn wait_state(bed: &Testbed, id: u32, states: &[&str], secs: u64) -> JobInfo {
    bed.wait_job(id, states, Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("{e}\nlog: {}", daemon_log(bed)))
}

fn wait_until(bed: &Testbed, what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s\nlog: {}",
            daemon_log(bed)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn daemon_log(bed: &Testbed) -> String {
    let log = std::fs::read_to_string(bed.path("log/hadar-serve-fork.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// The `w` tensor of a checkpoint the training program (or `hadar average`) wrote.
fn weights(path: &str) -> [f64; 2] {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let d = &b[8 + n..8 + n + 16];
    [
        f64::from_le_bytes(d[..8].try_into().unwrap()),
        f64::from_le_bytes(d[8..].try_into().unwrap()),
    ]
}

/// Checks the tracker of a completed forked job: rounds numbered from 0, only consolidated
/// rounds counted, their steps adding up to exactly the total, every consolidated
/// checkpoint the steps-weighted average of its copies or, for a round with an outer step,
/// `S + LR (MU v + delta)` with `v = MU v_prev + delta` (`delta` = that average - the round's
/// start; `v_prev` from the velocity file the round recorded reading, zero without one, and
/// `v` the file it wrote). Returns the consolidated rounds.
fn check_tracker(fork: &Value, total: u64) -> Vec<Value> {
    assert_eq!(fork["state"], "done", "{fork:#}");
    assert_eq!(fork["steps_done"].as_f64(), Some(total as f64), "{fork:#}");
    let rounds = fork["rounds"].as_array().cloned().unwrap_or_default();
    let numbers: Vec<u64> = rounds
        .iter()
        .map(|r| r["round"].as_u64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (0..rounds.len() as u64).collect::<Vec<_>>(),
        "{fork:#}"
    );
    let counted: Vec<Value> = rounds
        .iter()
        .filter(|r| r["state"] == "consolidated")
        .cloned()
        .collect();
    let sum: f64 = counted.iter().map(|r| r["steps"].as_f64().unwrap()).sum();
    assert_eq!(sum, total as f64, "exactly the total, once: {fork:#}");
    let mut before = [0.0, 0.0];
    for r in &counted {
        let copies = r["copies"].as_array().unwrap();
        let ok: Vec<&Value> = copies.iter().filter(|c| c["ok"] == true).collect();
        let steps: f64 = ok.iter().map(|c| c["steps"].as_f64().unwrap()).sum();
        assert_eq!(steps, r["steps"].as_f64().unwrap(), "{r:#}");
        let mut expect = [0.0, 0.0];
        let mut wsum = 0.0;
        for (k, c) in copies.iter().enumerate() {
            if c["ok"] != true {
                continue;
            }
            let w = c["weight"].as_f64().expect("a weight");
            wsum += w;
            let own = weights(c["checkpoint"].as_str().unwrap());
            assert_eq!(own[0], before[0] + k as f64 + 1.0, "{r:#}");
            expect[0] += w * own[0];
            expect[1] += w * own[1];
            if steps > 0.0 {
                let want = c["steps"].as_f64().unwrap() / steps;
                assert!((w - want).abs() < 1e-9, "weight {w} is steps/total {want}");
            }
        }
        assert!((wsum - 1.0).abs() < 1e-9, "{r:#}");
        let merged = weights(r["consolidated"].as_str().unwrap());
        if let Some(o) = r["outer"].as_object() {
            let (lr, mu) = (o["lr"].as_f64().unwrap(), o["momentum"].as_f64().unwrap());
            // The velocity file of an F64 model holds one F64 tensor `w` of 2: read alike.
            let v_prev = o["momentum_from"].as_str().map(weights).unwrap_or([0.0; 2]);
            let v_out = o["momentum_out"].as_str().map(weights);
            for i in 0..2 {
                let delta = expect[i] - before[i];
                let v = mu * v_prev[i] + delta;
                if let Some(v_out) = v_out {
                    assert!(
                        (v_out[i] - v).abs() < 1e-9,
                        "round {}: velocity {v_out:?}, expected {v}",
                        r["round"]
                    );
                }
                expect[i] = before[i] + lr * (mu * v + delta);
            }
        }
        for i in 0..2 {
            assert!(
                (merged[i] - expect[i]).abs() < 1e-9,
                "round {}: averaged {merged:?}, expected {expect:?}",
                r["round"]
            );
        }
        before = merged;
    }
    counted
}

// ----- scenarios -----

fn forked_job_runs_copies_on_several_types_and_completes_exactly(bed: &mut Testbed) {
    let serve = Serve::start(bed, "complete");
    let total = 500;
    let id = submit_forked(bed, total, 1, "outer=mean", "");
    let dependent = submit_dependent(bed, id);
    // Its copies run as one heterogeneous job, one component per node, as the job's user,
    // while the logical job stays pending (held) with its progress in its comment.
    let mut leader = 0;
    wait_until(bed, "a copy job runs", 40, || {
        let running: Vec<u64> = copy_jobs(bed, id)
            .into_iter()
            .filter(|(_, s)| s == "RUNNING")
            .map(|(j, _)| j)
            .collect();
        leader = running.first().copied().unwrap_or(0);
        leader != 0
    });
    let detail = bed
        .client("scontrol", &["-d", "show", "job", &leader.to_string()])
        .unwrap();
    let (components, _) = hadar_slurm::job::parse_jobs(&detail);
    assert!(components.len() >= 2, "several copies: {detail}");
    let mut types = std::collections::BTreeSet::new();
    let mut nodes = std::collections::BTreeSet::new();
    for c in &components {
        assert_eq!(c.het_job_id, Some(leader), "{detail}");
        assert_eq!(
            c.user_id,
            Some(USER.0),
            "copies run as the job's user: {detail}"
        );
        let parts = c.gpu_parts();
        assert_eq!(parts.len(), 1, "one node and one type per copy: {detail}");
        assert!(
            nodes.insert(parts[0].0.clone()),
            "one copy per node: {detail}"
        );
        types.insert(parts[0].1.clone());
    }
    assert!(types.len() >= 2, "copies on several GPU types: {types:?}");
    let logical = bed.job(id).unwrap();
    assert_eq!(
        logical.field("JobState").as_deref(),
        Some("PENDING"),
        "{}",
        logical.0
    );
    let comment = logical.field("Comment").unwrap_or_default();
    assert!(
        comment.starts_with("hadar-fork:v1;state=active;round=") && comment.contains(";steps="),
        "{comment}"
    );
    let status = serve.hadar(&["status"]);
    assert!(status.contains("forked: round"), "{status}");

    let info = serve::wait_completed(bed, id, 180);
    assert_eq!(info.field("ExitCode").as_deref(), Some("0:0"), "{}", info.0);
    assert!(
        output(bed, id).contains(&format!("{total}/{total} steps")),
        "the finish step saw the job done: {}",
        output(bed, id)
    );
    let dep = wait_state(bed, dependent, &["COMPLETED", "FAILED", "CANCELLED"], 30);
    assert_eq!(
        dep.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        dep.0
    );
    let dep_start = hadar_slurm::job::parse_time(&dep.field("StartTime").unwrap()).unwrap();
    let end = hadar_slurm::job::parse_time(&info.field("EndTime").unwrap()).unwrap();
    assert!(
        dep_start >= end,
        "afterok: the dependent started after the job ended"
    );

    let fork = serve.status(id)["fork"].clone();
    let counted = check_tracker(&fork, total);
    assert!(!counted.is_empty());
    // The job's tracker file repeats each consolidation with `hadar average --weights-from`.
    let tracker = serve.spool.join(id.to_string()).join("tracker.jsonl");
    let again = bed.path("fork-jobs/again.safetensors");
    let last = counted.last().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(["average", "--out"])
        .arg(&again)
        .arg("--weights-from")
        .arg(&tracker)
        .args([
            "--job",
            &id.to_string(),
            "--round",
            &last["round"].to_string(),
        ])
        .output()
        .unwrap();
    same_file_after(
        &out,
        &again,
        last["consolidated"].as_str().unwrap(),
        "the tracker file gives the same average",
    );
    assert!(copy_jobs(bed, id).is_empty(), "no copies left");
    // Each counted round taught the daemon the copies' measured rates.
    let log = daemon_log(bed);
    assert!(
        log.lines()
            .any(|l| l.contains("learned from the copies' rates")
                && l.contains(&format!("job={id}"))),
        "{log}"
    );
}

/// A plain job and a forked one at once (the mixed round): the plain job runs where Hadar
/// placed it (the only node with 4 V100s) and keeps it; the forked job's copies go only to
/// the GPUs it leaves, and the forked job completes exactly.
fn plain_and_forked_jobs_share_the_cluster(bed: &mut Testbed) {
    let serve = Serve::start(bed, "mixed");
    let out = format!(
        "--output={}/plain-%j.txt",
        serve::fork_jobs_dir(bed).display()
    );
    let plain = serve::submit(
        bed,
        &["--gpus=4", &out],
        &serve::script("resnet50-b64", 10_000_000, "gpu-types=v100"),
    );
    wait_state(bed, plain, &["RUNNING"], 40);
    let held = vec![("n1".to_string(), "v100".to_string(), 4)];
    assert_eq!(serve::allocation(bed, plain), held);
    let total = 300;
    let id = submit_forked(bed, total, 1, "", "");
    wait_state(bed, id, &["COMPLETED"], 180);
    assert_eq!(serve::allocation(bed, plain), held, "the plain job stayed");
    let fork = serve.status(id)["fork"].clone();
    assert!(!check_tracker(&fork, total).is_empty());
    for r in fork["rounds"].as_array().unwrap() {
        for c in r["copies"].as_array().unwrap() {
            assert_ne!(c["node"], "n1", "a copy on the plain job's GPUs: {r:#}");
        }
    }
    bed.client("scancel", &[&plain.to_string()])
        .expect("cancel the plain job");
    every_round_replays(&serve);
}

/// A burst of forked jobs: rounds woken by the burst's later submissions come while copy
/// jobs of the rounds before them may still wait in Slurm's queue (a heterogeneous job
/// starts at a backfill pass). They plan around those copies: at no round's start do the
/// open rounds' copies hold more GPUs of a type on a node than it has. (Copies planned over
/// them waited in Slurm's queue and trained a second or two of their round: seen in
/// docs/prediction.md's seed 5.)
fn a_burst_of_forked_jobs_never_books_a_gpu_twice(bed: &mut Testbed) {
    let serve = Serve::start(bed, "burst");
    let ids: Vec<u32> = (0..8).map(|_| submit_forked(bed, 300, 1, "", "")).collect();
    for id in &ids {
        wait_state(bed, *id, &["COMPLETED"], 240);
    }
    let rounds: Vec<Value> = ids
        .iter()
        .flat_map(|id| {
            let fork = serve.status(*id)["fork"].clone();
            check_tracker(&fork, 300);
            fork["rounds"].as_array().cloned().unwrap_or_default()
        })
        .collect();
    // The test cluster's GPUs (tests/slurm-harness).
    let capacity: HashMap<(&str, &str), u64> = [
        (("n1", "v100"), 4),
        (("n2", "p100"), 4),
        (("n3", "k80"), 4),
        (("n4", "v100"), 2),
        (("n4", "k80"), 2),
    ]
    .into();
    let time = |r: &Value, key: &str| r[key].as_f64();
    for r in &rounds {
        let at = time(r, "started_s").unwrap();
        let mut used: HashMap<(String, String), u64> = HashMap::new();
        let open = rounds.iter().filter(|o| {
            time(o, "started_s").unwrap() <= at && time(o, "ended_s").is_none_or(|e| e > at)
        });
        for c in open.flat_map(|o| o["copies"].as_array().cloned().unwrap_or_default()) {
            let key = (
                c["node"].as_str().unwrap().to_string(),
                c["gpu_type"].as_str().unwrap().to_string(),
            );
            *used.entry(key).or_default() += c["gpus"].as_u64().unwrap();
        }
        for ((node, ty), gpus) in &used {
            assert!(
                *gpus <= capacity[&(node.as_str(), ty.as_str())],
                "at {at} s open rounds hold {gpus} x {ty} on {node}: {rounds:#?}"
            );
        }
    }
}

/// `hadar replay --all` on the run's state database: every kept round, the forked job's
/// planned rounds of copies included, decides the same again from its snapshot.
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

fn failing_forked_job_fails_and_its_afterok_dependent_never_runs(bed: &mut Testbed) {
    let serve = Serve::start(bed, "fail");
    let id = submit_forked(bed, 300, 1, "", "fail");
    let dependent = submit_dependent(bed, id);
    let info = wait_state(bed, id, &["COMPLETED", "FAILED", "CANCELLED"], 120);
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("FAILED"),
        "{}",
        info.0
    );
    assert_eq!(info.field("ExitCode").as_deref(), Some("1:0"), "{}", info.0);
    assert!(output(bed, id).contains("failed"), "{}", output(bed, id));
    let fork = serve.status(id)["fork"].clone();
    assert_eq!(fork["state"], "failed", "{fork:#}");
    assert_eq!(fork["steps_done"].as_f64(), Some(0.0), "{fork:#}");
    let rounds = fork["rounds"].as_array().unwrap();
    assert!(rounds.len() >= 2 && rounds.iter().all(|r| r["state"] != "consolidated"));
    std::thread::sleep(Duration::from_secs(4));
    let dep = bed.job(dependent).unwrap();
    assert_eq!(
        dep.field("JobState").as_deref(),
        Some("PENDING"),
        "{}",
        dep.0
    );
    assert_eq!(
        dep.field("Reason").as_deref(),
        Some("DependencyNeverSatisfied"),
        "{}",
        dep.0
    );
    bed.client("scancel", &[&dependent.to_string()]).unwrap();
}

/// A forked job whose user excluded nodes (`-x n1,n4`) runs its copies only on the others:
/// its copies are offered the nodes it allows, as a plain job's placement is.
fn a_forked_jobs_copies_run_only_where_its_user_allows(bed: &mut Testbed) {
    let _serve = Serve::start(bed, "fork-exclude");
    let id = submit_forked_with(bed, 1_000_000, 1, "", "", &["-x", "n1,n4"]);
    let mut leader = 0;
    wait_until(bed, "a copy job runs", 40, || {
        leader = copy_jobs(bed, id)
            .into_iter()
            .find(|(_, s)| s == "RUNNING")
            .map_or(0, |(j, _)| j);
        leader != 0
    });
    let detail = bed
        .client("scontrol", &["-d", "show", "job", &leader.to_string()])
        .unwrap();
    let (components, _) = hadar_slurm::job::parse_jobs(&detail);
    let nodes: Vec<String> = components
        .iter()
        .flat_map(|c| c.gpu_parts().into_iter().map(|p| p.0))
        .collect();
    assert!(!nodes.is_empty(), "{detail}");
    assert!(
        nodes.iter().all(|n| n == "n2" || n == "n3"),
        "copies only on n2 and n3, not {nodes:?}: {detail}"
    );
    bed.client("scancel", &[&id.to_string()]).unwrap();
    wait_until(bed, "its copies are gone", 3 * ROUND_S as u64, || {
        copy_jobs(bed, id).is_empty()
    });
}

fn scancel_of_a_forked_job_stops_its_copies(bed: &mut Testbed) {
    let serve = Serve::start(bed, "cancel");
    let id = submit_forked(bed, 1_000_000, 1, "", "");
    wait_until(bed, "a copy job runs", 40, || {
        copy_jobs(bed, id).iter().any(|(_, s)| s == "RUNNING")
    });
    bed.client("scancel", &[&id.to_string()]).unwrap();
    wait_until(bed, "its copies are gone", 3 * ROUND_S as u64, || {
        copy_jobs(bed, id).is_empty()
    });
    wait_until(
        bed,
        "the tracker says cancelled",
        3 * ROUND_S as u64,
        || serve.status(id)["fork"]["state"] == "cancelled",
    );
    let fork = serve.status(id)["fork"].clone();
    let rounds = fork["rounds"].as_array().unwrap();
    assert_eq!(
        rounds.last().unwrap()["state"],
        "abandoned",
        "the cancelled round counts nothing: {fork:#}"
    );
    let counted: f64 = rounds
        .iter()
        .filter(|r| r["state"] == "consolidated")
        .map(|r| r["steps"].as_f64().unwrap())
        .sum();
    assert_eq!(fork["steps_done"].as_f64(), Some(counted), "{fork:#}");
    // No new copies start for it afterwards.
    std::thread::sleep(Duration::from_secs(ROUND_S as u64 + 2));
    assert!(copy_jobs(bed, id).is_empty());
}

fn daemon_killed_mid_round_counts_every_round_once(bed: &mut Testbed) {
    let mut serve = Serve::start(bed, "crash");
    serve.kill();
    // The default consolidation, an outer Nesterov step (nesterov:1:0.5) from round 1 on.
    let total = 1500;
    let id = submit_forked(bed, total, 1, "", "");
    // Killed after submitting round 0's copies, before recording their job: restarted, it
    // adopts that copy job (by name) instead of submitting another.
    serve.restart_and_crash_at(bed, "fork-copies-submitted");
    // Killed after averaging round 0, before counting it; then right after counting it:
    // the round is averaged again from the same files and counted once.
    serve.restart_and_crash_at(bed, "fork-averaged");
    serve.restart_and_crash_at(bed, "fork-counted");
    // Killed after averaging round 1 (the first outer step: its velocity file written from
    // zero) and round 2 (from round 1's velocity), before counting them: the redone
    // averaging must read the same velocity, not the file the killed attempt wrote.
    serve.restart_and_crash_at(bed, "fork-averaged");
    serve.restart_and_crash_at(bed, "fork-averaged");
    serve.restart(bed);
    wait_until(bed, "a copy job runs", 40, || {
        copy_jobs(bed, id).iter().any(|(_, s)| s == "RUNNING")
    });
    // Killed while the copies run: they finish without it; restarted, it completes the
    // round from their results.
    serve.kill();
    wait_until(bed, "the copies end", 30, || copy_jobs(bed, id).is_empty());
    std::thread::sleep(Duration::from_secs(1));
    serve.restart(bed);
    // Killed again right after a round starts or ends, twice.
    for _ in 0..2 {
        std::thread::sleep(Duration::from_secs(ROUND_S as u64 / 2 + 1));
        serve.restart(bed);
    }
    let info = wait_state(bed, id, &["COMPLETED", "FAILED", "CANCELLED"], 240);
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        info.0
    );
    let fork = serve.status(id)["fork"].clone();
    let counted = check_tracker(&fork, total);
    let stepped: Vec<&Value> = counted.iter().filter(|r| r["outer"].is_object()).collect();
    assert!(
        stepped.len() >= 2 && stepped[1]["outer"]["momentum_from"].is_string(),
        "rounds 1 and 2 took the outer step, round 2 from round 1's velocity: {fork:#}"
    );
    let round0 = &fork["rounds"][0];
    assert_eq!(
        round0["state"], "consolidated",
        "round 0 was adopted: {fork:#}"
    );
    let all = bed.client("scontrol", &["show", "job"]).unwrap();
    let (jobs, _) = hadar_slurm::job::parse_jobs(&all);
    let leaders = jobs
        .iter()
        .filter(|j| {
            j.name == format!("hadar-fork-{id}-r0") && j.het_job_id.is_none_or(|h| h == j.id)
        })
        .count();
    assert_eq!(
        leaders, 1,
        "one copy job for round 0, adopted, not submitted again"
    );
    assert!(
        serve.spool.join(id.to_string()).join("round-0").is_dir(),
        "the spool holds the rounds"
    );
}

/// Consolidation where the data is: the daemon runs with the spool hidden from it (an empty
/// tmpfs over it in its own mount namespace), so it can neither write the copies' script
/// nor read their results nor average them; the forked job still completes exactly, its
/// rounds averaged inside Slurm, on a compute node, as its user, the daemon learning each
/// round's result from its copy job's Comment.
fn forked_job_completes_with_its_spool_hidden_from_the_daemon(bed: &mut Testbed) {
    let serve = Serve::start_opts(bed, "hidden", ROUND_S, 2, true);
    let pid = serve.child.id();
    wait_until(bed, "the daemon's spool is hidden", 20, || {
        std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).is_ok_and(|m| {
            m.lines()
                .any(|l| l.contains(&format!(" {} ", serve.spool.display())) && l.contains("tmpfs"))
        })
    });
    let total = 400;
    let id = submit_forked(bed, total, 1, "", "");
    let info = serve::wait_completed(bed, id, 180);
    assert_eq!(info.field("ExitCode").as_deref(), Some("0:0"), "{}", info.0);
    // check_tracker reads each averaged checkpoint (here, outside the daemon's namespace)
    // and checks its weights against the copies' steps.
    let fork = serve.status(id)["fork"].clone();
    let counted = check_tracker(&fork, total);
    assert!(!counted.is_empty(), "{fork:#}");
    // The averaging ran in the copy jobs, on compute nodes, as the job's user: the copy
    // jobs report it in their comments, and the files are the user's.
    let all = bed.client("scontrol", &["show", "job"]).unwrap();
    let (jobs, _) = hadar_slurm::job::parse_jobs(&all);
    let nodes = bed.client("sinfo", &["-h", "-N", "-o", "%N"]).unwrap();
    for r in &counted {
        let name = format!("hadar-fork-{id}-r{}", r["round"]);
        let leader = jobs
            .iter()
            .find(|j| j.name == name && j.het_job_id.is_none_or(|h| h == j.id))
            .unwrap_or_else(|| panic!("copy job {name} in Slurm: {all}"));
        assert_eq!(leader.user_id, Some(USER.0), "{name}");
        let comment = leader.comment.as_deref().unwrap_or_default();
        assert!(
            comment.starts_with("hadar-round:v1;avg=ok;c0=ok:"),
            "{name}: {comment}"
        );
        // Its batch script (which averaged) ran on one of the compute nodes.
        let host = bed
            .job(leader.id as u32)
            .ok()
            .and_then(|j| j.field("BatchHost"))
            .unwrap_or_default();
        assert!(
            nodes.lines().any(|n| n.trim() == host),
            "{name} ran on a compute node: {host:?} not in {nodes}"
        );
        let consolidated = r["consolidated"].as_str().unwrap();
        let meta = std::fs::metadata(consolidated).expect("the averaged checkpoint exists");
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&meta),
            USER.0,
            "{consolidated} was written by the job's user"
        );
    }
    let tracker = serve.spool.join(id.to_string()).join("tracker.jsonl");
    let lines = std::fs::read_to_string(&tracker).expect("the job's tracker file");
    assert_eq!(
        lines.lines().count(),
        counted.len(),
        "one line per round: {lines}"
    );
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&tracker).unwrap()),
        USER.0
    );
    // And the daemon's namespace still shows an empty spool.
    let seen = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-m", "ls", "-A"])
        .arg(&serve.spool)
        .output()
        .unwrap();
    assert!(
        seen.status.success() && seen.stdout.is_empty(),
        "the daemon sees an empty spool: {seen:?}"
    );
}

/// The PyTorch digits example (wrappers/examples/digits_torch.py, through the hadar_fork
/// helper) as a forked job with the default consolidation, the outer Nesterov step. It runs
/// as root: the test cluster's copies run with the submitter's PATH, and the Python that has
/// torch may live in root's home (pyenv), which other users cannot read. Steps are paced
/// (0.2 s) so that the job takes at least two 60 s rounds even on a fast machine (4 copies
/// do at most 4 x 290 steps a round). A copy that starts after its deadline (importing
/// torch in four processes at once took over 40 s on this loaded 2-core machine) fails its
/// round by design (`BudgetSpent`); the daemon then redoes the round, so it is given more
/// failed rounds than the default before it gives up. About 3 minutes on a quiet machine;
/// 13 minutes at a load average of 7.5 on 2 cores, hence the long wait.
fn pytorch_example_trains_forked_with_the_outer_step(bed: &mut Testbed) {
    let serve = Serve::start_with_rounds(bed, "torch", 60, 6);
    let dir = serve::fork_jobs_dir(bed);
    let total = 1600;
    let program =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("wrappers/examples/digits_torch.py");
    let script = format!(
        "#!/bin/sh\n#HADAR fork=yes steps={total}\nexport OMP_NUM_THREADS=1\nexec {runner} -- python3 {program} train --seed 1 --step-seconds 0.2\n",
        runner = serve::fork_runner().display(),
        program = program.display(),
    );
    let sub = bed.sbatch(
        &[
            "--gpus=1",
            &format!("--output={}/out-%j.txt", dir.display()),
            "--job-name=digits-torch",
        ],
        Some(&script),
    );
    assert!(sub.ok, "sbatch failed: {}", sub.stderr);
    let id = sub.job_id.expect("a job id");
    let info = wait_state(bed, id, &["COMPLETED", "FAILED", "CANCELLED"], 1500);
    let fork = serve.status(id)["fork"].clone();
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}\n{fork:#}\n{}",
        info.0,
        copies_output(&serve, id)
    );
    // Exactly the total, counted once; consolidated rounds on several GPU types.
    assert_eq!(fork["state"], "done", "{fork:#}");
    assert_eq!(fork["steps_done"].as_f64(), Some(total as f64), "{fork:#}");
    let rounds = fork["rounds"].as_array().unwrap();
    let counted: Vec<&Value> = rounds
        .iter()
        .filter(|r| r["state"] == "consolidated")
        .collect();
    let sum: f64 = counted.iter().map(|r| r["steps"].as_f64().unwrap()).sum();
    assert_eq!(sum, total as f64, "{fork:#}");
    let types: std::collections::BTreeSet<&str> = counted
        .iter()
        .flat_map(|r| r["copies"].as_array().unwrap())
        .filter(|c| c["ok"] == true)
        .map(|c| c["gpu_type"].as_str().unwrap())
        .collect();
    assert!(types.len() >= 2, "copies on several GPU types: {types:?}");
    assert!(counted.len() >= 2, "several rounds: {fork:#}");
    // Round 0 is the copies' mean (no start checkpoint on disk); every later counted round
    // took the outer step, and repeating its averaging command gives the same bytes (what a
    // daemon restarted after averaging does).
    assert!(counted[0]["outer"].is_null(), "{fork:#}");
    for r in &counted[1..] {
        let o = &r["outer"];
        assert!(
            o.is_object(),
            "outer step in round {}: {fork:#}",
            r["round"]
        );
        let again = bed.path(&format!("fork-jobs/again-{}.safetensors", r["round"]));
        let velocity = bed.path(&format!("fork-jobs/again-v-{}.safetensors", r["round"]));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hadar"));
        cmd.args(["average", "--out"]).arg(&again);
        cmd.args([
            "--outer",
            "nesterov",
            "--start",
            r["start_from"].as_str().unwrap(),
        ]);
        cmd.args([
            "--outer-lr",
            &o["lr"].to_string(),
            "--outer-momentum",
            &o["momentum"].to_string(),
        ]);
        cmd.arg("--momentum-state").arg(&velocity);
        match o["momentum_from"].as_str() {
            Some(from) => cmd.args(["--momentum-from", from]),
            None => cmd.arg("--momentum-zero"),
        };
        for c in r["copies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["ok"] == true)
        {
            cmd.arg(format!(
                "{}:{}",
                c["checkpoint"].as_str().unwrap(),
                c["steps"]
            ));
        }
        let out = cmd.output().unwrap();
        same_file_after(
            &out,
            &again,
            r["consolidated"].as_str().unwrap(),
            &format!(
                "round {}: the daemon's consolidation is the outer step",
                r["round"]
            ),
        );
        assert_eq!(
            std::fs::read(&velocity).unwrap(),
            std::fs::read(o["momentum_out"].as_str().unwrap()).unwrap()
        );
        // Copies after the first round started from their index's inner AdamW state.
        assert!(
            r["copies"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["inner_state_from"].is_string()),
            "{r:#}"
        );
    }
    // The final model classifies the held-out digits far better than chance.
    let last = counted.last().unwrap()["consolidated"].as_str().unwrap();
    let out = Command::new("python3")
        .arg(&program)
        .args(["evaluate", last])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["accuracy"].as_f64().unwrap() > 0.8, "{v}");
    println!(
        "    digits_torch forked: {} rounds counted, types {types:?}, held-out accuracy {}",
        counted.len(),
        v["accuracy"]
    );
}

/// Checks that `hadar average` (whose output is `out`) succeeded and wrote `again` with the
/// same bytes as `original`.
fn same_file_after(out: &std::process::Output, again: &Path, original: &str, what: &str) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(again).unwrap(),
        std::fs::read(original).unwrap(),
        "{what}"
    );
}

/// Every round's copy output of a forked job, for failure messages.
fn copies_output(serve: &Serve, id: u32) -> String {
    let dir = serve.spool.join(id.to_string());
    let mut text = String::new();
    for r in 0..10 {
        if let Ok(t) = std::fs::read_to_string(dir.join(format!("round-{r}/copies.out"))) {
            text.push_str(&format!("--- round {r}\n{t}"));
        }
    }
    text
}
