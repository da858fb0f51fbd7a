//! `hadar-playground`: a real Slurm with hadar on this machine, to try it as a user would
//! (what `kind` is for Kubernetes). `up` starts the test cluster's controller and four
//! nodes with fake GPUs of three types, installs the job_submit/hadar plugin with its own
//! install script, starts `hadar serve` against it, waits for its first round and prints the
//! commands to try; the cluster keeps running after `up` returns. `down` stops every daemon it
//! started and removes its folder. Run through `./playground`, which installs and builds what
//! it needs first.

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use hadar_slurm_testbed::{Options, Plugin, Testbed, kill_leftovers, slurm_release, stop_daemons};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The controller's port unless `HADAR_TESTBED_PORT` says otherwise: away from the tests'
/// default (17000), so the test suite can run while the playground does.
const PLAYGROUND_PORT: &str = "16000";

/// How long `up` waits for the daemon's first round.
const FIRST_ROUND_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(
    name = "hadar-playground",
    about = "A real Slurm with hadar on this machine"
)]
struct Cli {
    /// The folder holding the playground's configuration, state and logs.
    #[arg(long, global = true, default_value = "/var/tmp/hadar-playground")]
    dir: PathBuf,
    #[command(subcommand)]
    command: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Start Slurm (munge, slurmctld, four slurmd), the plugin and `hadar serve`.
    Up,
    /// Stop everything `up` started and remove its folder.
    Down,
}

/// One file for the plugin and the daemon, as on a real cluster. Rounds are short so that a
/// job submitted in the tour starts within seconds.
const PLAYGROUND_TOML: &str = r#"# hadar.toml of the hadar playground (see etc/hadar.toml for every key)
[slurm]
managed_partitions = ["gpu", "old"]
default_partition = "gpu"
slurm_conf = "{scratch}/etc/slurm.conf"

[plugin]
notify_timeout_ms = 5

[sidecar]
socket = "{scratch}/run/hadar.sock"
state = "{scratch}/state.db"
round_seconds = 5
preempt_grace_seconds = 5
"#;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if std::env::var_os("HADAR_TESTBED_PORT").is_none() {
        // SAFETY: set before any thread starts.
        unsafe { std::env::set_var("HADAR_TESTBED_PORT", PLAYGROUND_PORT) };
    }
    let result = match cli.command {
        Action::Up => up(&cli.dir),
        Action::Down => down(&cli.dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hadar-playground: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn up(dir: &Path) -> Result<()> {
    let hadar = sibling_binary("hadar")?;
    if dir.join("run/hadar-serve.pid").exists() {
        bail!(
            "a playground already runs in {} (stop it with `./playground down`)",
            dir.display()
        );
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let nodes = hadar_slurm_testbed::nodes::from_env().map_err(anyhow::Error::msg)?;
    eprintln!(
        "hadar-playground: starting Slurm with {} nodes in {}",
        nodes.len(),
        dir.display()
    );
    let bed = Testbed::start(Options {
        scratch: dir.to_path_buf(),
        plugin: Plugin::InstallScript(root.join("slurm-plugin/install.sh")),
        hadar_toml: PLAYGROUND_TOML.to_string(),
        time_zone: None,
        machine_config: false,
        accounting: false,
        nodes,
    })
    .context("starting the Slurm cluster")?;
    let config = bed.path("etc/hadar.toml");
    start_daemon(&bed, &hadar, &config)?;
    wait_first_round(&hadar, &config, &bed.path("log/hadar-serve.log"))?;
    print_tour(&bed, &hadar, &config);
    bed.keep_running();
    Ok(())
}

fn down(dir: &Path) -> Result<()> {
    if !dir.exists() {
        eprintln!("hadar-playground: nothing runs in {}", dir.display());
        return Ok(());
    }
    cancel_jobs(dir);
    stop_daemons(&dir.join("run"));
    kill_leftovers(dir).context("stopping the jobs' processes")?;
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    eprintln!("hadar-playground: stopped, and {} removed", dir.display());
    Ok(())
}

/// Cancels every job, whoever submitted it, so that Slurm ends their processes before its
/// daemons stop; waits until the queue is empty, up to a bound (a controller that is down
/// answers nothing, and [`kill_leftovers`] then ends what runs).
fn cancel_jobs(dir: &Path) {
    let conf = dir.join("etc/slurm.conf");
    let Some(ids) = queued_jobs(&conf).filter(|ids| !ids.is_empty()) else {
        return;
    };
    let _ = Command::new("scancel")
        .arg("--full")
        .args(&ids)
        .env("SLURM_CONF", &conf)
        .output();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && queued_jobs(&conf).is_some_and(|ids| !ids.is_empty()) {
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The ids of the jobs in the queue; `None` when squeue fails.
fn queued_jobs(conf: &Path) -> Option<Vec<String>> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%i"])
        .env("SLURM_CONF", conf)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// The `hadar` binary built beside this one (`./playground` builds both).
fn sibling_binary(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe().context("finding this program's path")?;
    let path = me.with_file_name(name);
    if !path.is_file() {
        bail!(
            "{} not found: build it first (`./playground` does)",
            path.display()
        );
    }
    Ok(path)
}

/// Starts `hadar serve` in its own session, so it outlives `up`, with its pid file beside
/// Slurm's, where `down` finds it.
fn start_daemon(bed: &Testbed, hadar: &Path, config: &Path) -> Result<()> {
    let log_path = bed.path("log/hadar-serve.log");
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let mut command = Command::new(hadar);
    command
        .args(["serve", "--config"])
        .arg(config)
        .env("HADAR_LOG", "info")
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory of this process.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = command.spawn().context("starting hadar serve")?;
    std::fs::write(bed.path("run/hadar-serve.pid"), child.id().to_string())
        .context("writing the daemon's pid file")?;
    Ok(())
}

/// Waits until `hadar status` shows a completed round; the daemon's log tail if it dies.
fn wait_first_round(hadar: &Path, config: &Path, log: &Path) -> Result<()> {
    let deadline = Instant::now() + FIRST_ROUND_TIMEOUT;
    loop {
        let out = Command::new(hadar)
            .args(["status", "--format", "json", "--config"])
            .arg(config)
            .stderr(Stdio::null())
            .output()
            .context("running hadar status")?;
        let has_round = out.status.success()
            && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|status| status["round"].is_object());
        if has_round {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(15).collect();
            bail!(
                "hadar serve did not complete a round in {FIRST_ROUND_TIMEOUT:?}; its log ({}) ends:\n{}",
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn print_tour(bed: &Testbed, hadar: &Path, config: &Path) {
    let conf = bed.path("etc/slurm.conf");
    let release = slurm_release().unwrap_or_else(|| "Debian's".into());
    let nodes: Vec<String> = bed
        .nodes()
        .iter()
        .take(8)
        .map(|node| {
            let gpus: Vec<String> = node.gpus.iter().map(|(t, n)| format!("{n} {t}")).collect();
            format!("{} ({})", node.name, gpus.join(" + "))
        })
        .chain((bed.nodes().len() > 8).then(|| format!("... {} nodes in all", bed.nodes().len())))
        .collect();
    let path_line = match std::env::var("HADAR_SLURM_PREFIX") {
        Ok(prefix) if !prefix.is_empty() => format!(" PATH={prefix}/bin:$PATH"),
        _ => String::new(),
    };
    println!(
        "\nThe hadar playground runs: Slurm {release} with job_submit/hadar, nodes {}, and hadar serve.\n\
         Its files are in {dir}; the daemon's log is {dir}/log/hadar-serve.log.\n\n\
         Point your shell at it, then submit a job, watch it and ask hadar why it runs where it runs:\n\n\
         \x20 export SLURM_CONF={conf}{path_line}\n\
         \x20 sbatch --gpus=2 --wrap 'echo GPUs $CUDA_VISIBLE_DEVICES; sleep 120'\n\
         \x20 squeue -o '%.5i %.9T %.8N %.20b %R'\n\
         \x20 {hadar} explain 1 --config {config}\n\n\
         `{hadar} status --config {config}` shows the rounds and the GPUs; `./playground down` stops it all.",
        nodes.join(", "),
        dir = bed.scratch().display(),
        conf = conf.display(),
        hadar = hadar.display(),
        config = config.display(),
    );
}
