//! What the real-cluster tests of `hadar serve` share: a daemon started with its own config
//! and state database (the real `hadar` binary), batch scripts running `hadar emulate`,
//! submission and waiting helpers. Included by each test binary with `#[path]`; each uses
//! only some of it.
#![allow(dead_code)]

use hadar_slurm_testbed::{JobInfo, Testbed};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Emulated jobs run this many times faster than Gavel measured.
pub const TIME_SCALE: f64 = 50.0;

/// A running `hadar serve`, killed when dropped.
pub struct Serve {
    child: Child,
    /// The daemon's config file.
    pub config: PathBuf,
    /// Its state database.
    pub state: PathBuf,
}

impl Serve {
    /// Writes a daemon configuration for scenario `name` and starts the daemon. Its lease is
    /// short (more than the 1 s grace plus the 10 s command timeout): these scenarios kill
    /// and restart the daemon often, and each new one waits for its killed predecessor's
    /// lease to expire (the default 90 s would change which crash points a run reaches).
    pub fn start(bed: &Testbed, name: &str) -> Serve {
        Serve::start_with(bed, name, &[])
    }

    /// [`Serve::start`] with extra environment variables for the daemon (e.g. its `TZ`).
    pub fn start_with(bed: &Testbed, name: &str, env: &[(&str, &str)]) -> Serve {
        Serve::start_configured(bed, name, "", env)
    }

    /// [`Serve::start_with`] with more `[sidecar]` lines in the daemon's config.
    pub fn start_configured(
        bed: &Testbed,
        name: &str,
        sidecar: &str,
        env: &[(&str, &str)],
    ) -> Serve {
        let config = bed.path(&format!("etc/serve-{name}.toml"));
        let state = bed.path(&format!("state-{name}.db"));
        let _ = std::fs::remove_file(&state);
        // The tests change the site's rules (reservations, limits, partition states) while
        // the daemon runs and look for them in the next round: it reads them every round.
        let text = format!(
            "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{conf}\"\n\n\
             [sidecar]\nsocket = \"{sock}\"\nstate = \"{state}\"\nround_seconds = 2\npreempt_grace_seconds = 1\n\
             restart_seconds = 2\nthroughput_scale = {TIME_SCALE}\ncommand_timeout_seconds = 10\n\
             lease_seconds = 12\nmax_clock_skew_seconds = 1\nsite_read_seconds = 0\n{sidecar}",
            conf = bed.path("etc/slurm.conf").display(),
            sock = bed.path("run/hadar.sock").display(),
            state = state.display(),
        );
        std::fs::write(&config, text).expect("write the daemon's config");
        Serve::spawn_with(bed, config, state, env)
    }

    pub fn spawn(bed: &Testbed, config: PathBuf, state: PathBuf) -> Serve {
        Serve::spawn_with(bed, config, state, &[])
    }

    /// Starts the daemon with extra environment variables (e.g. a crash point).
    pub fn spawn_with(
        bed: &Testbed,
        config: PathBuf,
        state: PathBuf,
        env: &[(&str, &str)],
    ) -> Serve {
        Serve::spawn_command(
            bed,
            Command::new(env!("CARGO_BIN_EXE_hadar")),
            config,
            state,
            env,
        )
    }

    /// Starts the daemon under a host name of its own, `host` (in a UTS namespace of its
    /// own; the tests run as root): to the leader's lease it is a daemon on another host,
    /// which cannot tell whether a holder on this one still runs.
    pub fn spawn_on_host(bed: &Testbed, config: PathBuf, state: PathBuf, host: &str) -> Serve {
        let mut command = Command::new("unshare");
        command.args([
            "--uts",
            "--",
            "sh",
            "-c",
            "echo \"$0\" > /proc/sys/kernel/hostname && exec \"$@\"",
            host,
            env!("CARGO_BIN_EXE_hadar"),
        ]);
        Serve::spawn_command(bed, command, config, state, &[])
    }

    /// Runs `command serve --config CONFIG` with `env`, its output into the testbed's log.
    fn spawn_command(
        bed: &Testbed,
        mut command: Command,
        config: PathBuf,
        state: PathBuf,
        env: &[(&str, &str)],
    ) -> Serve {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(bed.path("log/hadar-serve.log"))
            .expect("open the daemon's log");
        let child = command
            .args(["serve", "--config"])
            .arg(&config)
            .env("HADAR_LOG", "info")
            .envs(env.iter().copied())
            .env("SLURM_CONF", bed.path("etc/slurm.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start hadar serve");
        Serve {
            child,
            config,
            state,
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `secs` for the daemon to exit on its own; whether it did.
    pub fn wait_exit(&mut self, secs: u64) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn restart(&mut self, bed: &Testbed) {
        self.kill();
        *self = Serve::spawn(bed, self.config.clone(), self.state.clone());
    }

    /// Waits until the daemon has completed `n` more rounds (its log's `round done` lines
    /// from now on), so that a check that nothing changes spans that many of its decisions
    /// however slow the machine, where a fixed sleep would span as many seconds.
    pub fn wait_rounds(&self, bed: &Testbed, n: usize) {
        let log = bed.path("log/hadar-serve.log");
        let from = std::fs::metadata(&log).map_or(0, |m| m.len());
        wait_until(
            &format!("{n} more rounds of the daemon"),
            30 + 10 * n as u64,
            || rounds_logged_since(&log, from) >= n,
        );
    }

    /// The rounds the daemon's log says are done so far (restarts included).
    pub fn rounds_done(&self, bed: &Testbed) -> usize {
        rounds_logged_since(&bed.path("log/hadar-serve.log"), 0)
    }

    /// Runs `hadar ARGS --state <db>` and returns its standard output.
    pub fn hadar(&self, args: &[&str]) -> String {
        run_hadar(&self.state, args)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

// ----- helpers -----

/// A batch script running `hadar emulate`; its output is appended, so a requeued job's earlier
/// runs stay in it.
pub fn script(job_type: &str, steps: u64, extra_directives: &str) -> String {
    format!(
        "#!/bin/sh\n#SBATCH --open-mode=append\n#HADAR type={job_type} steps={steps} {extra_directives}\nexec {hadar} emulate --job-type {job_type} --steps {steps} --time-scale {TIME_SCALE} --report-every 1\n",
        hadar = env!("CARGO_BIN_EXE_hadar")
    )
}

pub fn submit(bed: &Testbed, args: &[&str], text: &str) -> u32 {
    let sub = bed.sbatch(args, Some(text));
    assert!(sub.ok, "sbatch {args:?} failed: {}", sub.stderr);
    sub.job_id
        .unwrap_or_else(|| panic!("no job id: {}", sub.stdout))
}

pub fn output_args(bed: &Testbed) -> String {
    format!("--output={}/out-%j.txt", bed.path("jobs").display())
}

pub fn output(bed: &Testbed, id: u32) -> String {
    std::fs::read_to_string(bed.path(&format!("jobs/out-{id}.txt"))).unwrap_or_default()
}

pub fn detail(bed: &Testbed, id: u32) -> String {
    bed.client("scontrol", &["-d", "show", "job", &id.to_string()])
        .unwrap_or_default()
}

/// The GPUs a running job holds, from `scontrol -d show job`: sorted (node, type, count).
pub fn allocation(bed: &Testbed, id: u32) -> Vec<(String, String, u32)> {
    let (jobs, _) = hadar_slurm::job::parse_jobs(&detail(bed, id));
    let mut parts = jobs
        .into_iter()
        .find(|j| j.id == u64::from(id))
        .map(|j| j.gpu_parts())
        .unwrap_or_default();
    parts.sort();
    parts
}

pub fn wait_state(bed: &Testbed, id: u32, states: &[&str], secs: u64) -> JobInfo {
    bed.wait_job(id, states, Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("{e}\nlog: {}", daemon_log(bed)))
}

/// Waits up to `secs` for job `id` to end, and fails the test unless it completed.
pub fn wait_completed(bed: &Testbed, id: u32, secs: u64) -> JobInfo {
    let info = wait_state(bed, id, &["COMPLETED", "FAILED", "CANCELLED"], secs);
    assert_eq!(
        info.field("JobState").as_deref(),
        Some("COMPLETED"),
        "{}",
        info.0
    );
    info
}

pub fn wait_until(what: &str, secs: u64, f: impl FnMut() -> bool) {
    assert!(poll_until(secs, f), "{what}: not within {secs} s");
}

/// Whether `f` holds within `secs` seconds (asked every 250 ms), for a caller that says
/// what it saw when it did not.
pub fn poll_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    true
}

/// How many rounds the daemon's log at `log` records after its first `from` bytes.
fn rounds_logged_since(log: &std::path::Path, from: u64) -> usize {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    let read = std::fs::File::open(log).and_then(|mut f| {
        f.seek(SeekFrom::Start(from))?;
        f.read_to_string(&mut text)
    });
    match read {
        Ok(_) => text.matches("round done").count(),
        Err(_) => 0,
    }
}

pub fn daemon_log(bed: &Testbed) -> String {
    let log = std::fs::read_to_string(bed.path("log/hadar-serve.log")).unwrap_or_default();
    log.lines()
        .rev()
        .take(30)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn wait_queue_empty(bed: &Testbed) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let q = bed
            .client("squeue", &["-h", "-o", "%i %T"])
            .unwrap_or_default();
        if q.trim().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

pub fn gavel_rate(job_type: &str, gpu_type: &str, workers: u32) -> f64 {
    let table = hadar_formats::embedded::throughputs().unwrap();
    let name = table.resolve_job_type(job_type).unwrap();
    table.rate_or_scaled(name, gpu_type, workers).unwrap()
}

/// The rate `hadar emulate` printed for its run.
pub fn printed_rates(out: &str) -> Vec<f64> {
    out.lines()
        .filter_map(|l| l.split(" rate ").nth(1))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Holds GPUs with jobs Slurm runs on its own (`#HADAR off`), one per `(node, gres)`.
pub fn occupy(bed: &Testbed, what: &[(&str, &str)]) -> Vec<u32> {
    let ids: Vec<u32> = what
        .iter()
        .map(|(node, gres)| {
            submit(
                bed,
                &["-w", node, &format!("--gres={gres}"), "--job-name=filler"],
                "#!/bin/sh\n#HADAR off\nsleep 600\n",
            )
        })
        .collect();
    for id in &ids {
        wait_state(bed, *id, &["RUNNING"], 30);
    }
    ids
}

/// Drains `node` (`scontrol update NodeName=N State=DRAIN`), as an admin does before work on it.
pub fn drain(bed: &Testbed, node: &str) {
    bed.client(
        "scontrol",
        &[
            "update",
            &format!("NodeName={node}"),
            "State=DRAIN",
            "Reason=hadar-test",
        ],
    )
    .expect("drain a node");
}

/// Puts `node` back in service (`State=RESUME`).
pub fn resume(bed: &Testbed, node: &str) {
    bed.client(
        "scontrol",
        &["update", &format!("NodeName={node}"), "State=RESUME"],
    )
    .expect("resume a node");
}

/// Runs `hadar ARGS --state STATE` (status, explain) and returns its standard output; fails
/// the test if it fails.
pub fn run_hadar(state: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hadar"))
        .args(args)
        .arg("--state")
        .arg(state)
        .output()
        .expect("run hadar");
    assert!(
        out.status.success(),
        "hadar {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A job's `Comment` as users see it (`squeue -o %k`).
pub fn squeue_comment(bed: &Testbed, id: u32) -> String {
    bed.client("squeue", &["-h", "-j", &id.to_string(), "-o", "%k"])
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The fork runner of this checkout (`wrappers/hadar-fork-run`).
pub fn fork_runner() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("wrappers/hadar-fork-run")
}

/// A forked job's training program, `perl train.pl [fail]` (the fork-runner contract): it
/// starts from `HADAR_START_CHECKPOINT` when given, takes one step per 50 ms within its budget
/// and deadline, then writes a safetensors checkpoint (weights: its copy index + 1 and its
/// steps, added to the start's) and its step count.
pub const FORK_TRAIN: &str = r#"
use strict; use warnings; use Time::HiRes qw(time sleep);
exit 3 if @ARGV && $ARGV[0] eq 'fail';
my @w = (0.0, 0.0);
if (my $f = $ENV{HADAR_START_CHECKPOINT}) {
    open(my $in, '<:raw', $f) or die "open $f: $!";
    local $/; my $b = <$in>;
    my $n = unpack('Q<', substr($b, 0, 8));
    @w = unpack('d<2', substr($b, 8 + $n, 16));
}
my $budget = $ENV{HADAR_STEP_BUDGET} // -1;
my $deadline = $ENV{HADAR_DEADLINE} // -1;
my $steps = 0;
while (($budget < 0 || $steps < $budget) && ($deadline < 0 || time() < $deadline - 0.3)) {
    sleep(0.05);
    $steps++;
}
my @out = ($w[0] + $ENV{HADAR_FORK_INDEX} + 1, $w[1] + $steps);
my $h = '{"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}';
$h .= ' ' x ((8 - length($h) % 8) % 8);
my $path = $ENV{HADAR_CHECKPOINT_OUT};
open(my $o, '>:raw', "$path.tmp") or die "write $path.tmp: $!";
print $o pack('Q<', length($h)), $h, pack('d<2', @out);
close($o) or die;
rename("$path.tmp", $path) or die;
open(my $s, '>', $ENV{HADAR_STEPS_FILE}) or die; print $s "$steps\n"; close($s);
"#;

/// A folder the job's user may write its output into, and the program.
pub fn fork_jobs_dir(bed: &Testbed) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = bed.path("fork-jobs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let prog = dir.join("train.pl");
    std::fs::write(&prog, FORK_TRAIN).unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}
