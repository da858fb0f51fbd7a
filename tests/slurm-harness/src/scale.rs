//! `hadar-scale`: hadar at a real site's size (issue 45). A test cluster of up to 256
//! emulated nodes (8 fake GPUs each), a queue of 1,000 to 10,000 GPU jobs of 1 to 16 GPUs
//! (two-node gangs among them) that run minutes, scheduled by `hadar serve` for a number of
//! rounds, and the same queue by Slurm alone. Not a test: the figures go in
//! docs/operations.md.
//!
//! Measured per queue size and scheduler, over the measured window (the daemon's rounds
//! after the queue was filled; as long for Slurm alone):
//! * each round's read, decide, enforce and total time, and the Slurm commands it ran and
//!   the bytes they answered (the daemon's `round done` lines);
//! * slurmctld's RPCs by type (`sdiag`, before and after) and its CPU time (`/proc`);
//! * the latency a user beside it sees: `squeue`, `sbatch` and `scontrol show job N`,
//!   each about once a second;
//! * the daemon's peak memory (`VmHWM`);
//! * for reference, one full `scontrol show job --json`: its bytes and time.

use clap::Parser;
use hadar_slurm_testbed::bench::{self, Burst, log_number, quantile};
use hadar_slurm_testbed::{DEFAULT_HADAR_TOML, Options, Plugin, Testbed, nodes};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `hadar-scale`'s command line.
#[derive(Parser, Debug)]
#[command(
    name = "hadar-scale",
    about = "hadar serve on a large emulated Slurm cluster: per-round cost to slurmctld and a user's latency, hadar on and off"
)]
struct Cli {
    /// The `hadar` binary the daemon runs (needed unless --simulator-input).
    #[arg(long, value_name = "PATH", required_unless_present = "simulator_input")]
    hadar: Option<PathBuf>,
    /// Nodes of the test cluster (8 GPUs each), at most 256.
    #[arg(long, default_value_t = 256)]
    nodes: usize,
    /// Queue sizes to measure, e.g. 1000,5000,10000.
    #[arg(
        long,
        value_name = "LIST",
        default_value = "1000,5000,10000",
        value_delimiter = ',',
        value_parser = at_least_one
    )]
    jobs: Vec<usize>,
    /// The daemon's rounds to measure after the queue is filled.
    #[arg(long, default_value_t = 20, value_parser = at_least_one)]
    rounds: usize,
    /// The daemon's round, seconds.
    #[arg(long, default_value_t = 10.0, value_parser = positive_seconds)]
    round_seconds: f64,
    /// Parallel submitters filling the queue.
    #[arg(long, default_value_t = 8, value_parser = at_least_one)]
    submitters: usize,
    /// Which schedulers to run: hadar (hadar serve), slurm (Slurm alone), or both.
    #[arg(long, value_delimiter = ',', default_value = "slurm,hadar")]
    modes: Vec<Mode>,
    /// Managed jobs declare no steps, so hadar takes each for `default_steps` (10,000 steps
    /// at 1 step/s per GPU: hours, where the jobs run minutes). By default each job says
    /// `#HADAR steps=` what its run time is at that rate.
    #[arg(long)]
    no_steps: bool,
    /// Write the queue as the simulator's input instead of running it, to DIR: a trace
    /// `scale-N.trace` (Gavel's format, all jobs arriving at 0) for each size of --jobs, the
    /// cluster `cluster.toml` and `throughputs.json` (the daemon's default rate, 1 step/s per
    /// GPU on every type); then `hadar simulate --trace ... --throughputs ... --cluster ...`.
    #[arg(long, value_name = "DIR")]
    simulator_input: Option<PathBuf>,
    /// Append each run's figures to FILE as JSON lines.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Who schedules the queue.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Slurm alone: every job `#HADAR off`.
    Slurm,
    /// `hadar serve`: every job managed.
    Hadar,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Slurm => "slurm",
            Mode::Hadar => "hadar",
        }
    }
}

type Error = Box<dyn std::error::Error>;

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("give a whole number, at least 1, not {s:?}")),
    }
}

fn positive_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("give a number of seconds above 0, not {s:?}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hadar-scale: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<(), Error> {
    if let Some(dir) = &cli.simulator_input {
        return write_simulator_input(cli, dir);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()?;
    let given = cli.hadar.as_ref().ok_or("give --hadar PATH")?;
    let hadar = given
        .canonicalize()
        .map_err(|e| format!("--hadar {}: {e}", given.display()))?;
    let nodes = nodes::sized(cli.nodes)?;
    let gpus: u32 = nodes.iter().map(|n| n.gpu_count()).sum();
    eprintln!(
        "starting a test cluster of {} nodes, {gpus} GPUs",
        nodes.len()
    );
    let started = Instant::now();
    let bed = Testbed::start(Options {
        scratch: hadar_slurm_testbed::scratch_on_this_port(&root.join("target/tmp/scale-testbed")),
        plugin: Plugin::InstallScript(root.join("slurm-plugin/install.sh")),
        hadar_toml: DEFAULT_HADAR_TOML.to_string(),
        time_zone: None,
        machine_config: false,
        accounting: false,
        nodes,
    })?;
    let up_s = started.elapsed().as_secs_f64();
    let slurmd_mib = daemons_rss_mib("slurmd");
    println!(
        "cluster: {} nodes, {gpus} GPUs, idle {up_s:.1} s after start (plugin build included); slurmd memory {slurmd_mib:.0} MiB in all",
        cli.nodes
    );
    for &jobs in &cli.jobs {
        for &mode in &cli.modes {
            let figures = measure(&bed, &hadar, cli, jobs, mode)?;
            figures.print();
            if let Some(path) = &cli.json {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                writeln!(f, "{}", figures.json(cli))?;
            }
            bench::cancel_and_wait(&bed, Duration::from_secs(600))?;
        }
    }
    Ok(())
}

/// What one run measured.
struct Figures {
    mode: Mode,
    jobs: usize,
    fill: Burst,
    fill_s: f64,
    rounds: Vec<String>,
    window_s: f64,
    rpcs: BTreeMap<String, u64>,
    ctld_cpu_s: f64,
    latency_ms: BTreeMap<&'static str, Vec<f64>>,
    hadar_peak_mib: Option<f64>,
    full_read: (usize, f64),
}

/// Fills the queue with `jobs` jobs for `mode`, then measures a window of `cli.rounds`
/// rounds.
fn measure(
    bed: &Testbed,
    hadar: &Path,
    cli: &Cli,
    jobs: usize,
    mode: Mode,
) -> Result<Figures, Error> {
    eprintln!("{} jobs, {}: filling the queue", jobs, mode.as_str());
    let mut daemon = match mode {
        Mode::Hadar => Some(start_daemon(bed, hadar, cli.round_seconds)?),
        Mode::Slurm => None,
    };
    let t = Instant::now();
    let fill = bench::burst(bed, jobs, cli.submitters, |i| job(i, mode, !cli.no_steps));
    let fill_s = t.elapsed().as_secs_f64();
    if !fill.failures.is_empty() {
        return Err(format!(
            "{} of {jobs} submissions failed, the first: {}",
            fill.failures.len(),
            fill.failures[0]
        )
        .into());
    }
    let full_read = full_read(bed)?;
    eprintln!(
        "{} jobs, {}: queue filled in {fill_s:.0} s; measuring",
        jobs,
        mode.as_str()
    );
    let log = bed.path("log/hadar-scale-serve.log");
    let rounds_before = round_lines(&log).len();
    let sdiag_before = sdiag(bed)?;
    let cpu_before = ctld_cpu_s(bed);
    let stop = AtomicBool::new(false);
    let window = Instant::now();
    let (latency_ms, rounds) = std::thread::scope(|s| {
        let probe = s.spawn(|| probe_latency(bed, &fill.ids, &stop));
        let rounds = match mode {
            Mode::Hadar => wait_rounds(&log, rounds_before, cli.rounds),
            Mode::Slurm => {
                std::thread::sleep(Duration::from_secs_f64(
                    cli.rounds as f64 * cli.round_seconds,
                ));
                Vec::new()
            }
        };
        stop.store(true, Ordering::SeqCst);
        (probe.join().unwrap_or_default(), rounds)
    });
    let window_s = window.elapsed().as_secs_f64();
    let ctld_cpu_s = ctld_cpu_s(bed) - cpu_before;
    let rpcs = bench::rpc_delta(&sdiag(bed)?, &sdiag_before);
    let hadar_peak_mib = daemon.as_ref().and_then(|c| peak_mib(c.id()));
    if let Some(d) = daemon.as_mut() {
        let _ = d.kill();
        let _ = d.wait();
    }
    Ok(Figures {
        mode,
        jobs,
        fill,
        fill_s,
        rounds,
        window_s,
        rpcs,
        ctld_cpu_s,
        latency_ms,
        hadar_peak_mib,
        full_read,
    })
}

/// Job `i` of the queue: 1, 2, 4, 8 or 16 GPUs (about 40/25/20/10/5 %; 16 spans two
/// nodes), running 2 to 10 minutes once started. Slurm alone's jobs say `#HADAR off`; with
/// `steps`, hadar's declare their steps at the daemon's default rate (1 step/s per GPU).
fn job(i: usize, mode: Mode, steps: bool) -> (Vec<String>, String) {
    let r = mix(i as u64);
    let gpus = match r % 20 {
        0..=7 => 1,
        8..=12 => 2,
        13..=16 => 4,
        17..=18 => 8,
        _ => 16,
    };
    let secs = 120 + (r / 20) % 481;
    let directive = match mode {
        Mode::Slurm => "#HADAR off\n".to_string(),
        Mode::Hadar if steps => format!("#HADAR steps={}\n", secs * gpus),
        Mode::Hadar => String::new(),
    };
    (
        vec![
            format!("--gpus={gpus}"),
            "--job-name=scale".into(),
            "--output=/dev/null".into(),
        ],
        // A checkpointing job outlives the preemption signal; the requeue that follows ends it.
        format!("#!/bin/sh\n{directive}trap '' USR1\nsleep {secs}\n"),
    )
}

/// The job type of the simulator's input: a name in Gavel's `MODEL (batch size B)` form.
const SIM_JOB_TYPE: &str = "Scale (batch size 1)";

/// Writes the queue, the cluster and the default rates as `hadar simulate`'s input (see
/// `--simulator-input`).
fn write_simulator_input(cli: &Cli, dir: &std::path::Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("--simulator-input {}: {e}", dir.display()))?;
    for &n in &cli.jobs {
        let mut trace = String::new();
        for i in 0..n {
            let (args, script) = job(i, Mode::Hadar, true);
            let gpus: u64 = args[0].trim_start_matches("--gpus=").parse()?;
            let steps: u64 = script
                .lines()
                .find_map(|l| l.strip_prefix("#HADAR steps="))
                .ok_or("a job without its steps")?
                .parse()?;
            trace.push_str(&format!(
                "{SIM_JOB_TYPE}\tpython3 train.py\t.\t--num_steps\t0\t{steps}\t{gpus}\t1\t-1.000000\t0\n"
            ));
        }
        std::fs::write(dir.join(format!("scale-{n}.trace")), trace)?;
    }
    let mut cluster =
        String::from("# hadar-scale's test cluster (tests/slurm-harness/src/nodes.rs)\n");
    for node in nodes::sized(cli.nodes)? {
        let gpus: Vec<String> = node
            .gpus
            .iter()
            .map(|(t, c)| format!("{t} = {c}"))
            .collect();
        cluster.push_str(&format!(
            "[[node]]\nname = \"{}\"\ngpus = {{ {} }}\n",
            node.name,
            gpus.join(", ")
        ));
    }
    std::fs::write(dir.join("cluster.toml"), cluster)?;
    let rates: serde_json::Map<String, serde_json::Value> = [1, 2, 4, 8, 16]
        .iter()
        .map(|g| {
            (
                format!("('{SIM_JOB_TYPE}', {g})"),
                serde_json::json!({ "null": *g as f64 }),
            )
        })
        .collect();
    let table: serde_json::Map<String, serde_json::Value> = ["v100", "p100", "k80"]
        .iter()
        .flat_map(|t| [t.to_string(), format!("{t}_unconsolidated")])
        .map(|t| (t, serde_json::Value::Object(rates.clone())))
        .collect();
    std::fs::write(
        dir.join("throughputs.json"),
        serde_json::to_string_pretty(&table)?,
    )?;
    println!("wrote the simulator's input to {}", dir.display());
    Ok(())
}

/// A fixed scramble of `i` (SplitMix64's finaliser): the same queue every run.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn start_daemon(bed: &Testbed, hadar: &Path, round_s: f64) -> Result<Child, Error> {
    let log = bed.path("log/hadar-scale-serve.log");
    let child = bench::start_serve(bed, hadar, "serve-scale", round_s, &log)?;
    // Its first round, on the empty queue, before the jobs arrive.
    if wait_rounds(&log, 0, 1).is_empty() {
        return Err(format!(
            "hadar serve did not complete a round; see {}",
            log.display()
        )
        .into());
    }
    Ok(child)
}

/// The daemon's `round done` lines in `log`.
fn round_lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("round done"))
        .map(str::to_string)
        .collect()
}

/// Waits (up to 30 minutes) for `n` rounds after the first `skip`, and returns them.
fn wait_rounds(log: &Path, skip: usize, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(1800);
    loop {
        let lines = round_lines(log);
        if lines.len() >= skip + n || Instant::now() > deadline {
            return lines.into_iter().skip(skip).take(n).collect();
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// One full `scontrol show job --json`: its bytes and seconds.
fn full_read(bed: &Testbed) -> Result<(usize, f64), Error> {
    let t = Instant::now();
    let out = bed.client("scontrol", &["show", "job", "--json"])?;
    Ok((out.len(), t.elapsed().as_secs_f64()))
}

/// `sdiag`'s RPC counts by message type.
fn sdiag(bed: &Testbed) -> Result<BTreeMap<String, u64>, Error> {
    Ok(bench::rpc_counts(&bed.client("sdiag", &[])?))
}

/// slurmctld's user and system CPU seconds so far.
fn ctld_cpu_s(bed: &Testbed) -> f64 {
    let pid = std::fs::read_to_string(bed.path("run/slurmctld.pid")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    // Fields after the command name in parentheses: utime is the 14th field, stime the 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) as f64 / ticks)
}

/// The resident memory of every process named `name` on this machine (the benchmark runs
/// alone on it), MiB.
fn daemons_rss_mib(name: &str) -> f64 {
    let mut kib = 0u64;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        kib += status_kib(&dir.join("status"), "VmRSS:").unwrap_or(0);
    }
    kib as f64 / 1024.0
}

fn status_kib(path: &Path, key: &str) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The peak resident memory (`VmHWM`) of process `pid`, MiB.
fn peak_mib(pid: u32) -> Option<f64> {
    status_kib(Path::new(&format!("/proc/{pid}/status")), "VmHWM:").map(|k| k as f64 / 1024.0)
}

/// A user beside the scheduler, about once a second until `stop`: `squeue`, `scontrol
/// show job N` of one of the queue's jobs, and `sbatch` of a held job (cancelled at once).
fn probe_latency(
    bed: &Testbed,
    ids: &[u32],
    stop: &AtomicBool,
) -> BTreeMap<&'static str, Vec<f64>> {
    let mut out: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
    let mut k = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        let _ = bed.client("squeue", &[]);
        out.entry("squeue").or_default().push(ms(t));
        if !ids.is_empty() {
            let id = ids[(mix(k) % ids.len() as u64) as usize].to_string();
            let t = Instant::now();
            let _ = bed.client("scontrol", &["show", "job", &id]);
            out.entry("scontrol show job").or_default().push(ms(t));
        }
        let t = Instant::now();
        let sub = bed.sbatch(
            &["-H", "--job-name=probe", "--output=/dev/null"],
            Some("#!/bin/sh\n#HADAR off\ntrue\n"),
        );
        out.entry("sbatch").or_default().push(ms(t));
        if let Some(id) = sub.job_id {
            let _ = bed.client("scancel", &[&id.to_string()]);
        }
        k += 1;
        std::thread::sleep(Duration::from_millis(1000).saturating_sub(t.elapsed()));
    }
    out
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// `median / p99` of `v`, ms.
fn med_p99(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (quantile(&v, 0.5), quantile(&v, 0.99))
}

/// The figures of the daemon's `round done` lines the benchmark reports.
const ROUND_KEYS: [&str; 9] = [
    "read_ms",
    "decision_ms",
    "enforce_ms",
    "total_ms",
    "slurm_commands",
    "slurm_bytes",
    "actions",
    "jobs_read",
    "jobs_listed",
];

impl Figures {
    /// The rounds' `key` figures.
    fn round_values(&self, key: &str) -> Vec<f64> {
        self.rounds
            .iter()
            .filter_map(|l| log_number(l, key))
            .collect()
    }

    fn total_rpcs(&self) -> u64 {
        self.rpcs.values().sum()
    }

    fn print(&self) {
        let (sb_med, sb_p99) = med_p99(&self.fill.ms);
        println!(
            "\n{} jobs, {}: queue filled in {:.0} s (sbatch median {sb_med:.1} ms, p99 {sb_p99:.1} ms); a full `scontrol show job --json` is {:.1} MB in {:.2} s",
            self.jobs,
            self.mode.as_str(),
            self.fill_s,
            self.full_read.0 as f64 / 1e6,
            self.full_read.1
        );
        if self.mode == Mode::Hadar {
            println!("  {} rounds:", self.rounds.len());
            for key in ROUND_KEYS {
                let (med, p99) = med_p99(&self.round_values(key));
                println!("    {key:<15} median {med:>12.1}  p99 {p99:>12.1}");
            }
            if let Some(m) = self.hadar_peak_mib {
                println!("  hadar serve peak memory {m:.0} MiB");
            }
        }
        println!(
            "  window {:.0} s: slurmctld CPU {:.1} s ({:.0}%), {} RPCs ({:.1}/s)",
            self.window_s,
            self.ctld_cpu_s,
            100.0 * self.ctld_cpu_s / self.window_s,
            self.total_rpcs(),
            self.total_rpcs() as f64 / self.window_s
        );
        let top: Vec<String> = {
            let mut v: Vec<(&String, &u64)> = self.rpcs.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1));
            v.iter().take(6).map(|(k, n)| format!("{k} {n}")).collect()
        };
        println!("    by type: {}", top.join(", "));
        for (what, v) in &self.latency_ms {
            let (med, p99) = med_p99(v);
            println!(
                "  user's {what:<18} n={:<4} median {med:>8.1} ms  p99 {p99:>8.1} ms",
                v.len()
            );
        }
    }

    fn json(&self, cli: &Cli) -> serde_json::Value {
        let rounds: serde_json::Map<String, serde_json::Value> = ROUND_KEYS
            .iter()
            .map(|k| (k.to_string(), serde_json::json!(self.round_values(k))))
            .collect();
        serde_json::json!({
            "nodes": cli.nodes,
            "jobs": self.jobs,
            "mode": self.mode.as_str(),
            "round_seconds": cli.round_seconds,
            "steps_declared": !cli.no_steps,
            "fill_s": self.fill_s,
            "fill_sbatch_ms": self.fill.ms,
            "full_read_bytes": self.full_read.0,
            "full_read_s": self.full_read.1,
            "rounds": rounds,
            "window_s": self.window_s,
            "slurmctld_cpu_s": self.ctld_cpu_s,
            "rpcs": self.rpcs,
            "latency_ms": self.latency_ms,
            "hadar_peak_mib": self.hadar_peak_mib,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_the_same_every_run_and_has_every_size() {
        let sizes: Vec<u32> = (0..2000)
            .map(|i| {
                let (args, _) = job(i, Mode::Hadar, true);
                args[0].trim_start_matches("--gpus=").parse().unwrap()
            })
            .collect();
        for g in [1, 2, 4, 8, 16] {
            assert!(sizes.contains(&g), "no job of {g} GPUs");
        }
        assert_eq!(job(7, Mode::Slurm, true).0, job(7, Mode::Hadar, true).0);
        assert!(job(7, Mode::Slurm, true).1.contains("#HADAR off"));
        assert!(job(7, Mode::Hadar, true).1.contains("#HADAR steps="));
        assert!(!job(7, Mode::Hadar, false).1.contains("#HADAR"));
    }
}
