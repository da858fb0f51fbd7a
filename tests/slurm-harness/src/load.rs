//! `hadar-load`: a burst of managed jobs (2,000 by default) on the real test cluster, with
//! `hadar serve` running: checks that every submission is accepted and held by the
//! job_submit/hadar plugin, measures the plugin's added latency under that load, and the
//! daemon's round time with the burst pending.
//!
//! Two bursts of the same size, from the same number of parallel submitters:
//! 1. without the plugin (`sbatch -H`, so the controller does the same hold work): the
//!    baseline sbatch latency with a queue growing to N jobs;
//! 2. with the plugin and `hadar serve` listening and scheduling: every job must be accepted
//!    and logged as held by the plugin, and end up in Slurm's queue.
//!
//! Printed: sbatch latency (median, p99) of both bursts and their difference, the time
//! inside the plugin per job (from its own log line), and the daemon's rounds while the N
//! jobs were pending (read nodes and jobs, decide, enforce, total). Not a test: figures go
//! in docs/hardening.md.

use hadar_slurm_testbed::bench::{self, log_number, quantile, queue, summary};
use hadar_slurm_testbed::{DEFAULT_HADAR_TOML, Options, Plugin, Testbed};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: hadar-load --hadar PATH [--jobs N] [--submitters K] [--rounds R]\n\
  Starts the Slurm test cluster, submits N jobs (default 2000) from K parallel submitters\n\
  (default 8) without and then with the plugin (hadar serve from PATH running), checks that\n\
  every managed one is held, and prints latency and the daemon's round times over R rounds\n\
  (default 12) with the jobs pending.";

struct Args {
    hadar: PathBuf,
    jobs: usize,
    submitters: usize,
    rounds: usize,
}

fn parse_args() -> Option<Args> {
    let mut args = std::env::args().skip(1);
    let mut out = Args {
        hadar: PathBuf::new(),
        jobs: 2000,
        submitters: 8,
        rounds: 12,
    };
    while let Some(a) = args.next() {
        let v = args.next()?;
        match a.as_str() {
            "--hadar" => out.hadar = PathBuf::from(v),
            "--jobs" => out.jobs = v.parse().ok().filter(|n| *n >= 1)?,
            "--submitters" => out.submitters = v.parse().ok().filter(|n| *n >= 1)?,
            "--rounds" => out.rounds = v.parse().ok().filter(|n| *n >= 1)?,
            _ => return None,
        }
    }
    (!out.hadar.as_os_str().is_empty()).then_some(out)
}

fn main() -> ExitCode {
    let Some(args) = parse_args() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hadar-load: {e}");
            ExitCode::FAILURE
        }
    }
}

type Error = Box<dyn std::error::Error>;

/// Every job sleeps 20 s once started, so that the daemon keeps finding finished jobs and
/// starting waiting ones (rounds with enforcement) while the burst is pending.
const JOB_SCRIPT: &str = "#!/bin/sh\nsleep 20\n";
/// The GPU request of every burst job.
const GRES: &str = "--gres=gpu:1";

/// Submits `n` of the burst's jobs with `args` from `k` threads: each sbatch's wall time (ms)
/// and the failures.
fn burst(bed: &Testbed, n: usize, k: usize, args: &[&str]) -> (Vec<f64>, Vec<String>) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let b = bench::burst(bed, n, k, |_| (args.clone(), JOB_SCRIPT.to_string()));
    (b.ms, b.failures)
}

fn cancel_and_wait(bed: &Testbed) -> Result<(), Error> {
    Ok(bench::cancel_and_wait(bed, Duration::from_secs(120))?)
}

fn start_daemon(bed: &Testbed, hadar: &Path) -> Result<std::process::Child, Error> {
    let log = bed.path("log/hadar-serve.log");
    Ok(bench::start_serve(bed, hadar, "serve-load", 5.0, &log)?)
}

fn run(a: &Args) -> Result<(), Error> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()?;
    let hadar = a.hadar.canonicalize()?;
    eprintln!("starting the test cluster (builds and installs the plugin)");
    let mut bed = Testbed::start(Options {
        scratch: root.join("target/tmp/load-testbed"),
        plugin: Plugin::InstallScript(root.join("slurm-plugin/install.sh")),
        hadar_toml: DEFAULT_HADAR_TOML.to_string(),
        time_zone: None,
        machine_config: false,
        accounting: false,
        nodes: hadar_slurm_testbed::nodes::default_nodes(),
    })?;
    let (mut base, base_s) = baseline_burst(&mut bed, a)?;
    let mut managed = managed_burst(&mut bed, &hadar, a)?;
    report(a, &mut base, base_s, &mut managed);
    let ok = managed.failed.is_empty()
        && managed.accepted.len() == a.jobs
        && managed.inside_us.len() >= a.jobs
        && managed.pending_held + managed.running == a.jobs
        && managed.rounds.len() >= a.rounds;
    cancel_and_wait(&bed)?;
    if let Some(first) = managed.failed.first() {
        return Err(format!(
            "{} managed submissions failed: {first}",
            managed.failed.len()
        )
        .into());
    }
    if !ok {
        return Err(format!(
            "not every job was accepted and held ({} accepted, {} logged held, {} held + {} running in the queue, {} full rounds)",
            managed.accepted.len(),
            managed.inside_us.len(),
            managed.pending_held,
            managed.running,
            managed.rounds.len()
        )
        .into());
    }
    Ok(())
}

/// The burst without the plugin, held by `sbatch -H`: each submission's latency (ms) and the
/// burst's length (s). The queue is emptied after it.
fn baseline_burst(bed: &mut Testbed, a: &Args) -> Result<(Vec<f64>, f64), Error> {
    bed.write_slurm_conf(None)?;
    bed.reconfigure()?;
    std::thread::sleep(Duration::from_secs(3));
    eprintln!("burst of {} jobs without the plugin", a.jobs);
    let started = Instant::now();
    let (base, base_failed) = burst(bed, a.jobs, a.submitters, &["-H", GRES]);
    let base_s = started.elapsed().as_secs_f64();
    if let Some(first) = base_failed.first() {
        return Err(format!(
            "{} submissions failed without the plugin: {first}",
            base_failed.len()
        )
        .into());
    }
    cancel_and_wait(bed)?;
    Ok((base, base_s))
}

/// What the burst with the plugin and `hadar serve` gave.
struct ManagedBurst {
    /// Accepted submissions' latencies, ms.
    accepted: Vec<f64>,
    /// The submissions that failed, with sbatch's words.
    failed: Vec<String>,
    /// The burst's length, s.
    seconds: f64,
    /// Time inside the plugin per held job, µs (from slurmctld's log).
    inside_us: Vec<f64>,
    /// Jobs the plugin held without notifying the daemon.
    not_notified: usize,
    /// Slurm's queue after the burst: all jobs, pending held ones and running ones.
    queued: usize,
    pending_held: usize,
    running: usize,
    /// The daemon's `round done` log lines while at least 95% of the burst was queued.
    rounds: Vec<String>,
}

/// The burst with the plugin installed and `hadar serve` running, then the daemon's rounds
/// with the burst in the queue (the daemon is stopped after them).
fn managed_burst(bed: &mut Testbed, hadar: &Path, a: &Args) -> Result<ManagedBurst, Error> {
    bed.write_slurm_conf(Some("hadar"))?;
    bed.reconfigure()?;
    std::thread::sleep(Duration::from_secs(3));
    let log_before = bed.controller_log().len();
    let mut daemon = start_daemon(bed, hadar)?;
    std::thread::sleep(Duration::from_secs(2));
    if let Some(status) = daemon.try_wait()? {
        let log = std::fs::read_to_string(bed.path("log/hadar-serve.log")).unwrap_or_default();
        return Err(format!("hadar serve exited at start ({status}): {}", log.trim()).into());
    }
    eprintln!(
        "burst of {} managed jobs with the plugin and hadar serve",
        a.jobs
    );
    let started = Instant::now();
    let (accepted, failed) = burst(bed, a.jobs, a.submitters, &[GRES]);
    let seconds = started.elapsed().as_secs_f64();
    let ctl_log = bed.controller_log();
    let new_log = &ctl_log[log_before.min(ctl_log.len())..];
    let inside_us: Vec<f64> = new_log
        .lines()
        .filter_map(|l| l.split(" held in ").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    let not_notified = new_log
        .lines()
        .filter(|l| l.contains(" held in ") && l.contains("sidecar not notified"))
        .count();
    let q = queue(bed)?;
    let pending_held = q
        .iter()
        .filter(|(_, s, r)| s == "PENDING" && r.starts_with("JobHeld"))
        .count();
    let running = q.iter().filter(|(_, s, _)| s == "RUNNING").count();
    let rounds = full_queue_rounds(bed, a);
    let _ = daemon.kill();
    let _ = daemon.wait();
    Ok(ManagedBurst {
        accepted,
        failed,
        seconds,
        inside_us,
        not_notified,
        queued: q.len(),
        pending_held,
        running,
        rounds,
    })
}

/// The daemon's `round done` lines after the burst while at least 95% of it is still in the
/// queue: waits for `a.rounds` of them, at most 10 minutes.
fn full_queue_rounds(bed: &Testbed, a: &Args) -> Vec<String> {
    let serve_log = bed.path("log/hadar-serve.log");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let text = std::fs::read_to_string(&serve_log).unwrap_or_default();
        let full: Vec<String> = text
            .lines()
            .filter(|l| l.contains("round done"))
            .filter(|l| log_number(l, "active").is_some_and(|n| n as usize * 20 >= a.jobs * 19))
            .map(str::to_string)
            .collect();
        if full.len() >= a.rounds || Instant::now() > deadline {
            return full;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Prints both bursts' latencies, the plugin's time, the queue and the daemon's rounds.
fn report(a: &Args, base: &mut [f64], base_s: f64, m: &mut ManagedBurst) {
    println!(
        "burst of {} jobs from {} parallel submitters",
        a.jobs, a.submitters
    );
    println!(
        "without the plugin (sbatch -H):   accepted {}/{} in {base_s:.1} s; sbatch ms {}",
        base.len(),
        a.jobs,
        summary(base)
    );
    println!(
        "with the plugin and hadar serve:  accepted {}/{} in {:.1} s; sbatch ms {}",
        m.accepted.len(),
        a.jobs,
        m.seconds,
        summary(&mut m.accepted)
    );
    println!(
        "added by the plugin: median {:+.2} ms, p99 {:+.2} ms",
        quantile(&m.accepted, 0.5) - quantile(base, 0.5),
        quantile(&m.accepted, 0.99) - quantile(base, 0.99)
    );
    if !m.inside_us.is_empty() {
        println!(
            "held by the plugin (its log): {} jobs ({} without a notice); time inside the plugin us {}",
            m.inside_us.len(),
            m.not_notified,
            summary(&mut m.inside_us)
        );
    }
    println!(
        "in Slurm's queue after the burst: {} jobs, {} pending held, {} running (started by hadar serve)",
        m.queued, m.pending_held, m.running
    );
    let with_actions: Vec<&String> = m
        .rounds
        .iter()
        .filter(|l| log_number(l, "actions").is_some_and(|n| n > 0.0))
        .collect();
    println!(
        "hadar serve rounds with at least 95% of the {} jobs in the queue: {} rounds, {} with actions (ms):",
        a.jobs,
        m.rounds.len(),
        with_actions.len()
    );
    for key in [
        "active",
        "actions",
        "read_ms",
        "decision_ms",
        "enforce_ms",
        "total_ms",
    ] {
        let mut v: Vec<f64> = m.rounds.iter().filter_map(|l| log_number(l, key)).collect();
        if !v.is_empty() {
            println!("  {key:<12} {}", summary(&mut v));
        }
    }
    for key in ["actions", "enforce_ms", "total_ms"] {
        let mut v: Vec<f64> = with_actions
            .iter()
            .filter_map(|l| log_number(l, key))
            .collect();
        if !v.is_empty() {
            println!("  with actions: {key:<12} {}", summary(&mut v));
        }
    }
}
