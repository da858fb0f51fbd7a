//! `hadar-testbed bench`: measures how long `sbatch` takes with and without the
//! job_submit/hadar plugin on the real test cluster (see slurm-plugin/bench/sbatch-latency.sh).
//!
//! Four configurations, measured in interleaved blocks so that drift of the shared machine
//! affects all alike: no plugin (jobs submitted held with -H, so the controller does the same
//! hold work); plugin with a managed job and no sidecar listening; plugin with a managed job
//! and a sidecar listening (a thread of this program accepting notices); plugin with an
//! unmanaged job (-H -p cpu). Jobs are cancelled after each block so the queue stays small.

use hadar_slurm_testbed::{DEFAULT_HADAR_TOML, Options, Plugin, Testbed};
use std::io::Read;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: hadar-testbed bench [--count N] [--block N]\n\
  Starts the Slurm test cluster, times N sbatch submissions per configuration\n\
  (default 400, at least 100) and prints median, p90, p99 and mean in milliseconds.";

/// Seconds to wait after switching the plugin on or off before measuring.
const SETTLE_SECONDS: u64 = 3;

struct Config {
    name: &'static str,
    plugin: bool,
    sidecar: bool,
    args: &'static [&'static str],
}

const CONFIGS: [Config; 4] = [
    Config {
        name: "no plugin (sbatch -H --gres=gpu:2)",
        plugin: false,
        sidecar: false,
        args: &["-H", "--gres=gpu:2"],
    },
    Config {
        name: "plugin, managed, sidecar down",
        plugin: true,
        sidecar: false,
        args: &["--gres=gpu:2"],
    },
    Config {
        name: "plugin, managed, sidecar listening",
        plugin: true,
        sidecar: true,
        args: &["--gres=gpu:2"],
    },
    Config {
        name: "plugin, unmanaged (-H -p cpu)",
        plugin: true,
        sidecar: false,
        args: &["-H", "-p", "cpu", "--gres=gpu:2"],
    },
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut count = 400usize;
    let mut block = 20usize;
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("bench") => {}
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    while let Some(a) = it.next() {
        let value = it.next().and_then(|v| v.parse::<usize>().ok());
        match (a.as_str(), value) {
            ("--count", Some(n)) if n >= 100 => count = n,
            ("--block", Some(n)) if n >= 1 => block = n,
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match bench(count, block) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hadar-testbed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn bench(count: usize, block: usize) -> Result<(), Box<dyn std::error::Error>> {
    let root = repo_root().canonicalize()?;
    let scratch = root.join("target/tmp/slurm-testbed");
    eprintln!(
        "starting the test cluster in {} (builds and installs the plugin)",
        scratch.display()
    );
    let mut bed = Testbed::start(Options {
        scratch,
        plugin: Plugin::InstallScript(root.join("slurm-plugin/install.sh")),
        hadar_toml: DEFAULT_HADAR_TOML.to_string(),
        time_zone: None,
        machine_config: false,
        accounting: false,
        nodes: hadar_slurm_testbed::nodes::default_nodes(),
    })?;
    let mut measured = measure(&mut bed, count, block)?;
    print_latencies(count, &mut measured.samples, measured.notices);
    print_plugin_time(&bed.controller_log());
    Ok(())
}

/// What the benchmark measured.
struct Measured {
    /// sbatch latencies (ms), per configuration of [`CONFIGS`].
    samples: Vec<Vec<f64>>,
    /// Notices the listening sidecar received.
    notices: usize,
}

/// `count` sbatch latencies per configuration, measured in blocks of `block` in a shuffled
/// order.
fn measure(
    bed: &mut Testbed,
    count: usize,
    block: usize,
) -> Result<Measured, Box<dyn std::error::Error>> {
    let socket = bed.path("run/hadar.sock");
    let decoy = bed.path("run/not-the-sidecar.sock");
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
    let mut plugin_on = true;
    let mut notices = 0usize;
    // Warm-up: caches, the plugin's first load, sbatch's first run.
    for c in &CONFIGS {
        set_plugin(bed, &mut plugin_on, c.plugin)?;
        // The unmeasured submissions right after a switch are also logged by the plugin.
        for _ in 0..5 {
            bed.sbatch(&[c.args, &["--wrap", "true"]].concat(), None);
        }
    }
    bed.cancel_all()?;
    let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
    while samples.iter().any(|s| s.len() < count) {
        // Shuffle the order of configurations every cycle (fixed seed, so runs are
        // comparable), so that neither a trend in the machine's load nor the position next to
        // a plugin switch favours one configuration.
        let mut order: Vec<usize> = (0..CONFIGS.len()).collect();
        for k in (1..order.len()).rev() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            order.swap(k, (rng % (k as u64 + 1)) as usize);
        }
        for i in order {
            let c = &CONFIGS[i];
            let n = block.min(count - samples[i].len());
            if n == 0 {
                continue;
            }
            if set_plugin(bed, &mut plugin_on, c.plugin)? {
                // Let the controller settle after the reconfigure before measuring: the first
                // seconds after one were seen to be slower, whichever configuration came next.
                std::thread::sleep(Duration::from_secs(SETTLE_SECONDS));
                for _ in 0..10 {
                    bed.sbatch(&[c.args, &["--wrap", "true"]].concat(), None);
                }
            }
            // The stand-in sidecar's polling thread runs in every configuration (bound to a
            // path the plugin does not use when the sidecar is "down"), so that its wake-ups,
            // which keep an otherwise idle CPU awake, do not favour one configuration.
            let listener = FakeSidecar::start(if c.sidecar { &socket } else { &decoy })?;
            for _ in 0..n {
                let t = Instant::now();
                let sub = bed.sbatch(&[c.args, &["--wrap", "true"]].concat(), None);
                let ms = t.elapsed().as_secs_f64() * 1000.0;
                if !sub.ok {
                    return Err(format!("sbatch failed in `{}`: {}", c.name, sub.stderr).into());
                }
                samples[i].push(ms);
            }
            let received = listener.stop();
            if c.sidecar {
                notices += received;
            }
            bed.cancel_all()?;
        }
    }
    Ok(Measured { samples, notices })
}

/// The latency table per configuration and the plugin's cost against no plugin.
fn print_latencies(count: usize, samples: &mut [Vec<f64>], notices: usize) {
    println!("sbatch latency over {count} submissions per configuration (milliseconds)");
    println!(
        "{:<38} {:>8} {:>8} {:>8} {:>8}",
        "configuration", "median", "p90", "p99", "mean"
    );
    let mut medians = Vec::new();
    for (c, s) in CONFIGS.iter().zip(samples.iter_mut()) {
        s.sort_by(|a, b| a.total_cmp(b));
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        let (m, p90, p99) = (quantile(s, 0.5), quantile(s, 0.9), quantile(s, 0.99));
        medians.push(m);
        println!("{:<38} {m:>8.2} {p90:>8.2} {p99:>8.2} {mean:>8.2}", c.name);
    }
    println!(
        "median difference, plugin (managed, sidecar down) minus no plugin: {:+.2} ms",
        medians[1] - medians[0]
    );
    println!(
        "median difference, plugin (managed, sidecar listening) minus no plugin: {:+.2} ms",
        medians[2] - medians[0]
    );
    println!(
        "median difference, plugin (unmanaged) minus no plugin: {:+.2} ms",
        medians[3] - medians[0]
    );
    println!("notices received by the listening sidecar: {notices} of {count}");
}

/// The plugin logs how long it spent on each managed job (from entry to return, notice
/// included): the plugin's own cost, without sbatch's process start and the RPC. Prints
/// it from slurmctld's log, split by whether the sidecar was notified.
fn print_plugin_time(log: &str) {
    let mut down = Vec::new();
    let mut up = Vec::new();
    for line in log.lines() {
        let Some(rest) = line.split("hadar: managed job from uid ").nth(1) else {
            continue;
        };
        let Some(us) = rest
            .split(" held in ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<f64>().ok())
        else {
            continue;
        };
        if line.contains("(sidecar not notified") {
            down.push(us)
        } else {
            up.push(us)
        }
    }
    println!(
        "time inside the plugin per managed job (microseconds, from slurmctld's log, warm-up included)"
    );
    for (name, v) in [("sidecar down", &mut down), ("sidecar listening", &mut up)] {
        if v.is_empty() {
            continue;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        println!(
            "  {name:<18} n={:<4} median {:>7.1}  p99 {:>7.1}  max {:>7.1}",
            v.len(),
            quantile(v, 0.5),
            quantile(v, 0.99),
            v[v.len() - 1]
        );
    }
}

/// The value at quantile `q` of sorted samples (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Enables or disables the plugin (slurm.conf and `scontrol reconfigure`); true if it changed.
fn set_plugin(
    bed: &mut Testbed,
    on: &mut bool,
    want: bool,
) -> Result<bool, Box<dyn std::error::Error>> {
    if *on == want {
        return Ok(false);
    }
    bed.write_slurm_conf(want.then_some("hadar"))?;
    bed.reconfigure()?;
    *on = want;
    Ok(true)
}

/// A stand-in sidecar: accepts connections on the socket and counts notice lines.
struct FakeSidecar {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
    path: PathBuf,
}

impl FakeSidecar {
    fn start(path: &std::path::Path) -> std::io::Result<FakeSidecar> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        listener.set_nonblocking(true)?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut lines = 0;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                        let mut text = String::new();
                        let _ = s.read_to_string(&mut text);
                        lines += text
                            .lines()
                            .filter(|l| l.starts_with("hadar-notice v1 "))
                            .count();
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            lines
        });
        Ok(FakeSidecar {
            stop,
            thread,
            path: path.to_path_buf(),
        })
    }

    fn stop(self) -> usize {
        // Let the last notices be read before stopping.
        std::thread::sleep(Duration::from_millis(100));
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let n = self.thread.join().unwrap_or(0);
        let _ = std::fs::remove_file(&self.path);
        n
    }
}
