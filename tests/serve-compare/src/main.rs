//! `hadar-serve-compare`: the comparison users care about, on the real Slurm test cluster.
//!
//! One heterogeneous workload (Gavel's job types, some multi-GPU, all submitted at once,
//! time-scaled so that it takes minutes) runs twice on the same four-node cluster:
//! (a) by Slurm alone, each job asking for its fastest GPU type as users do today, and
//! (b) by `hadar serve`, each job asking for a GPU count and letting Hadar choose. Every job
//! runs `hadar emulate`, which trains at the measured rate of the GPUs it was given. The
//! command prints the makespan and the average job completion time of both, from Slurm's
//! own submit and end times.
//!
//! Usage: `hadar-serve-compare --hadar PATH [--jobs N] [--time-scale X] [--seed N]
//! [--format table|json]`; run it as root on a machine with Slurm installed
//! (`tests/install-deps`), from the repository root.

use hadar_daemon::spec::{short_name, table_rate};
use hadar_slurm_testbed::{DEFAULT_HADAR_TOML, Options, Plugin, Testbed};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// One job of the workload.
#[derive(Clone, Debug)]
struct WorkJob {
    job_type: String,
    workers: u32,
    steps: u64,
    fastest: String,
}

/// How one run went.
#[derive(Clone, Debug)]
struct RunResult {
    makespan_s: f64,
    avg_jct_s: f64,
    jobs: usize,
}

struct Args {
    hadar: PathBuf,
    jobs: usize,
    time_scale: f64,
    seed: u64,
    json: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        hadar: PathBuf::from("target/debug/hadar"),
        jobs: 16,
        time_scale: 10.0,
        seed: 1,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        match k.as_str() {
            "--hadar" => a.hadar = PathBuf::from(v()?),
            "--jobs" => {
                a.jobs = v()?
                    .parse()
                    .map_err(|_| "--jobs: give a whole number".to_string())?
            }
            "--time-scale" => {
                a.time_scale = v()?
                    .parse()
                    .map_err(|_| "--time-scale: give a number".to_string())?
            }
            "--seed" => {
                a.seed = v()?
                    .parse()
                    .map_err(|_| "--seed: give a whole number".to_string())?
            }
            "--format" => a.json = v()? == "json",
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.jobs < 1 || a.time_scale.is_nan() || a.time_scale <= 0.0 {
        return Err("--jobs must be at least 1 and --time-scale positive".into());
    }
    a.hadar = std::fs::canonicalize(&a.hadar)
        .map_err(|e| format!("--hadar {}: {e}", a.hadar.display()))?;
    Ok(a)
}

/// A seeded workload: job types cycle through Gavel's table (types measured with the worker
/// count drawn), 1, 2 or 4 workers (about 60/25/15 %), each lasting 20 to 60 s at its
/// fastest type once time-scaled.
fn workload(n: usize, seed: u64, scale: f64) -> Vec<WorkJob> {
    let table = hadar_formats::embedded::throughputs().expect("embedded table");
    let types: Vec<String> = table.job_types().map(str::to_string).collect();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    while out.len() < n {
        let workers = match next() % 20 {
            0..=11 => 1,
            12..=16 => 2,
            _ => 4,
        };
        let jt = &types[(next() % types.len() as u64) as usize];
        let mut best: Option<(String, f64)> = None;
        for g in ["v100", "p100", "k80"] {
            if let Some(r) = table.rate(jt, g, workers).filter(|r| *r > 0.0)
                && best.as_ref().is_none_or(|(_, b)| r > *b)
            {
                best = Some((g.to_string(), r));
            }
        }
        let Some((fastest, rate)) = best else {
            continue;
        };
        // Every type must be able to run it, so that Hadar has a real choice.
        if ["v100", "p100", "k80"]
            .iter()
            .any(|g| table_rate(&table, jt, g, workers).is_none_or(|r| r <= 0.0))
        {
            continue;
        }
        let seconds = 20.0 + (next() % 41) as f64;
        let steps = (rate * scale * seconds).round().max(1.0) as u64;
        out.push(WorkJob {
            job_type: short_name(jt),
            workers,
            steps,
            fastest,
        });
    }
    out
}

fn script(hadar: &std::path::Path, j: &WorkJob, scale: f64, managed: bool) -> String {
    let directive = if managed {
        format!("#HADAR type={} steps={}", j.job_type, j.steps)
    } else {
        "#HADAR off".to_string()
    };
    format!(
        "#!/bin/sh\n{directive}\nexec {} emulate --job-type {} --steps {} --time-scale {scale} --report-every 2\n",
        hadar.display(),
        j.job_type,
        j.steps
    )
}

fn run(bed: &Testbed, a: &Args, work: &[WorkJob], managed: bool) -> Result<RunResult, String> {
    let mut ids = Vec::new();
    for j in work {
        let gres = if managed {
            format!("--gpus={}", j.workers)
        } else {
            format!("--gres=gpu:{}:{}", j.fastest, j.workers)
        };
        let out = format!("--output={}/cmp-%j.txt", bed.path("jobs").display());
        let sub = bed.sbatch(
            &[&gres, &out, "--job-name=cmp"],
            Some(&script(&a.hadar, j, a.time_scale, managed)),
        );
        if !sub.ok {
            return Err(format!("sbatch failed: {}", sub.stderr));
        }
        ids.push(sub.job_id.ok_or("sbatch printed no job id")?);
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut submit = Vec::new();
    let mut end = Vec::new();
    for id in &ids {
        let left = deadline.saturating_duration_since(Instant::now());
        let info = bed
            .wait_job(*id, &["COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"], left)
            .map_err(|e| e.to_string())?;
        if info.field("JobState").as_deref() != Some("COMPLETED") {
            return Err(format!("job {id} did not complete: {}", info.0));
        }
        let t = |k: &str| {
            info.field(k)
                .and_then(|v| hadar_slurm::job::parse_time(&v))
                .ok_or(format!("job {id}: no {k}"))
        };
        submit.push(t("SubmitTime")? as f64);
        end.push(t("EndTime")? as f64);
    }
    let first = submit.iter().copied().fold(f64::INFINITY, f64::min);
    let last = end.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let jct: f64 = submit.iter().zip(&end).map(|(s, e)| e - s).sum::<f64>() / ids.len() as f64;
    Ok(RunResult {
        makespan_s: last - first,
        avg_jct_s: jct,
        jobs: ids.len(),
    })
}

fn start_daemon(bed: &Testbed, a: &Args) -> Result<Child, String> {
    let config = bed.path("etc/serve-compare.toml");
    let state = bed.path("state-compare.db");
    let _ = std::fs::remove_file(&state);
    let text = format!(
        "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{}\"\n\n[sidecar]\nsocket = \"{}\"\nstate = \"{}\"\nround_seconds = 3\npreempt_grace_seconds = 1\nrestart_seconds = 3\nthroughput_scale = {}\n",
        bed.path("etc/slurm.conf").display(),
        bed.path("run/hadar.sock").display(),
        state.display(),
        a.time_scale
    );
    std::fs::write(&config, text).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(bed.path("log/hadar-serve-compare.log"))
        .map_err(|e| e.to_string())?;
    Command::new(&a.hadar)
        .args(["serve", "--config"])
        .arg(&config)
        .env("HADAR_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting hadar serve: {e}"))
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("hadar-serve-compare: {e}");
            return ExitCode::from(2);
        }
    };
    let work = workload(a.jobs, a.seed, a.time_scale);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let options = Options {
        scratch: std::env::temp_dir().join(format!(
            "hadar-serve-compare-{}",
            hadar_slurm_testbed::controller_port()
        )),
        plugin: Plugin::InstallScript(root.join("slurm-plugin/install.sh")),
        hadar_toml: DEFAULT_HADAR_TOML.to_string(),
    };
    let bed = match Testbed::start(options) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("hadar-serve-compare: cannot start the Slurm test cluster: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!("workload: {} jobs, time scale {}", work.len(), a.time_scale);
    let slurm = match run(&bed, &a, &work, false) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hadar-serve-compare: Slurm-alone run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut daemon = match start_daemon(&bed, &a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hadar-serve-compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    let hadar = run(&bed, &a, &work, true);
    let _ = daemon.kill();
    let _ = daemon.wait();
    let hadar = match hadar {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hadar-serve-compare: hadar run: {e}");
            return ExitCode::FAILURE;
        }
    };
    if a.json {
        let v = serde_json::json!({
            "jobs": work.len(), "time_scale": a.time_scale, "seed": a.seed,
            "slurm": {"makespan_s": slurm.makespan_s, "avg_jct_s": slurm.avg_jct_s},
            "hadar": {"makespan_s": hadar.makespan_s, "avg_jct_s": hadar.avg_jct_s},
        });
        println!("{v}");
    } else {
        let multi = work.iter().filter(|j| j.workers > 1).count();
        println!(
            "{} jobs of Gavel's types ({multi} multi-GPU), time scale {}, seed {}",
            slurm.jobs, a.time_scale, a.seed
        );
        println!(
            "{:<22} {:>12} {:>14}",
            "scheduler", "makespan (s)", "avg JCT (s)"
        );
        println!(
            "{:<22} {:>12.0} {:>14.1}",
            "Slurm (fastest type)", slurm.makespan_s, slurm.avg_jct_s
        );
        println!(
            "{:<22} {:>12.0} {:>14.1}",
            "hadar serve", hadar.makespan_s, hadar.avg_jct_s
        );
        println!(
            "hadar / Slurm: makespan {:.2}x, avg JCT {:.2}x",
            hadar.makespan_s / slurm.makespan_s,
            hadar.avg_jct_s / slurm.avg_jct_s
        );
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_seeded_heterogeneous_and_runnable_everywhere() {
        let w = workload(16, 1, 10.0);
        assert_eq!(w.len(), 16);
        assert!(w.iter().any(|j| j.workers > 1));
        let table = hadar_formats::embedded::throughputs().unwrap();
        for j in &w {
            let name = resolve_job_type(&table, &j.job_type).unwrap();
            let fast = table.rate(&name, &j.fastest, j.workers).unwrap();
            let secs = j.steps as f64 / (fast * 10.0);
            assert!((19.0..=61.0).contains(&secs), "{j:?}: {secs}");
        }
        let again = workload(16, 1, 10.0);
        assert_eq!(format!("{w:?}"), format!("{again:?}"));
    }
}
