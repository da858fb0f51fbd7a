//! The playground as the README tells a newcomer to use it: `up` starts a real Slurm with the
//! plugin and `hadar serve`, a GPU job submitted with the printed `SLURM_CONF` is placed by
//! hadar and completes, and `down` stops every daemon and removes the folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const PLAYGROUND: &str = env!("CARGO_BIN_EXE_hadar-playground");

/// Runs `down` when the test ends, passed or not, so a failure leaves no daemons behind.
struct Playground {
    dir: PathBuf,
}

impl Playground {
    fn run(&self, action: &str) -> Output {
        Command::new(PLAYGROUND)
            .arg(action)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("running hadar-playground {action}: {e}"))
    }
}

impl Drop for Playground {
    fn drop(&mut self) {
        if self.dir.exists() {
            let _ = self.run("down");
        }
    }
}

/// A Slurm client program: from the release the tests run against, when one is chosen.
fn slurm_command(name: &str, conf: &Path) -> Command {
    let program = match std::env::var("HADAR_SLURM_PREFIX") {
        Ok(prefix) if !prefix.is_empty() => format!("{prefix}/bin/{name}"),
        _ => name.to_string(),
    };
    let mut command = Command::new(program);
    command.env("SLURM_CONF", conf);
    command
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether any process still has `dir` on its command line (slurmctld, slurmd, munged and
/// `hadar serve` all do).
fn processes_under(dir: &Path) -> Vec<String> {
    let out = Command::new("pgrep")
        .args(["-a", "-f"])
        .arg(dir)
        .output()
        .expect("running pgrep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| !line.contains("pgrep"))
        .map(str::to_string)
        .collect()
}

#[test]
fn up_places_a_submitted_job_and_down_leaves_nothing_running() {
    let playground = Playground {
        dir: PathBuf::from(format!(
            "/var/tmp/hadar-playground-test-{}",
            std::process::id()
        )),
    };
    let up = playground.run("up");
    let said = text(&up);
    assert!(up.status.success(), "up failed: {said}");
    let conf = playground.dir.join("etc/slurm.conf");
    assert!(
        said.contains(&format!("export SLURM_CONF={}", conf.display())),
        "up prints the SLURM_CONF to use: {said}"
    );

    let out_file = playground.dir.join("tour.out");
    let submitted = slurm_command("sbatch", &conf)
        .args(["--parsable", "--gpus=2", "-o"])
        .arg(&out_file)
        .args(["--wrap", "echo GPUs=$CUDA_VISIBLE_DEVICES; sleep 1"])
        .output()
        .expect("running sbatch");
    assert!(submitted.status.success(), "sbatch: {}", text(&submitted));
    let id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string();

    let hadar = Path::new(PLAYGROUND).with_file_name("hadar");
    let config = playground.dir.join("etc/hadar.toml");
    wait_until(
        "the daemon records the job as completed",
        Duration::from_secs(120),
        || {
            let out = Command::new(&hadar)
                .args(["status", "--all", "--format", "json", "--config"])
                .arg(&config)
                .output()
                .expect("running hadar status");
            let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            status["jobs"].as_array().is_some_and(|jobs| {
                jobs.iter().any(|job| {
                    job["id"].to_string().trim_matches('"') == id
                        && job["final_state"] == "completed"
                        && job["starts"] == 1
                })
            })
        },
    );
    let ran = std::fs::read_to_string(&out_file).unwrap_or_default();
    let gpus = ran.trim().strip_prefix("GPUs=").unwrap_or_default();
    assert_eq!(
        gpus.split(',').filter(|g| !g.is_empty()).count(),
        2,
        "the job saw the two GPUs hadar placed it on: {ran:?}"
    );
    let explain = Command::new(&hadar)
        .args(["explain", &id, "--config"])
        .arg(&config)
        .output()
        .expect("running hadar explain");
    assert!(explain.status.success(), "explain {id}: {}", text(&explain));

    let down = playground.run("down");
    assert!(down.status.success(), "down failed: {}", text(&down));
    assert!(
        !playground.dir.exists(),
        "down removes {}",
        playground.dir.display()
    );
    wait_until(
        "no daemon of the playground runs",
        Duration::from_secs(10),
        || processes_under(&playground.dir).is_empty(),
    );
}
