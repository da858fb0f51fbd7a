//! `hadar emulate`: an example training job for Slurm that cooperates with `hadar serve`.
//!
//! It reads its own allocation from Slurm (which GPU types, how many), trains at the rate
//! Gavel measured for its job type on those types (a gang over several types goes at the
//! slowest type's rate), times a time scale so that tests take minutes, reports its progress
//! through its own Slurm comment, saves a checkpoint when it receives the checkpoint signal
//! and then waits to be requeued, and on a restart resumes from the checkpoint. It completes
//! exactly its total steps and exits 0.
//!
//! Run by the fork runner (`HADAR_CHECKPOINT_OUT` set), it is one copy of a forked job
//! instead: it trains at the rate of its copy's GPUs (`HADAR_GPU_TYPE`, `HADAR_GPUS`, set by
//! `hadar serve`), within its step budget and deadline, writes a safetensors checkpoint and
//! its step count, and exits 0 (see `wrappers/README.md`).

use crate::Failure;
use crate::cli::EmulateArgs;
use anyhow::{Context, anyhow};
use hadar_daemon::progress::Progress;
use hadar_slurm::{Slurm, SlurmConfig};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static CHECKPOINT_ASKED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_checkpoint_signal(_: libc::c_int) {
    CHECKPOINT_ASKED.store(true, Ordering::SeqCst);
}

/// Runs the emulated job.
pub fn run(a: EmulateArgs) -> Result<(), Failure> {
    let table = hadar_formats::embedded::throughputs().map_err(Failure::runtime)?;
    let job_type = table
        .resolve_job_type(&a.job_type)
        .map(str::to_owned)
        .ok_or_else(|| Failure::input(anyhow!("--job-type {}: not a job type of Gavel's table (e.g. resnet50-b64, transformer-b128, a3c)", a.job_type)))?;
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        return Err(Failure::input(anyhow!(
            "--time-scale {} must be a positive number",
            a.time_scale
        )));
    }
    // The checkpoint signal may come at any moment after the start (a daemon preempting a
    // job it has just started): catch it before anything else, never die of it.
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    let signal = signal_number(&a.signal)
        .ok_or_else(|| Failure::input(anyhow!("--signal {}: unknown signal name", a.signal)))?;
    unsafe {
        libc::signal(
            signal,
            on_checkpoint_signal as *const () as libc::sighandler_t,
        )
    };
    if let Some(out) = std::env::var_os("HADAR_CHECKPOINT_OUT") {
        return fork_copy(&a, &table, &job_type, Path::new(&out));
    }
    let job_id: Option<u64> = std::env::var("SLURM_JOB_ID")
        .ok()
        .and_then(|v| v.parse().ok());
    let slurm = Slurm::new(SlurmConfig::default());
    let gpus = job_gpus(&slurm, a.gpus.as_deref(), job_id)?;
    let workers: u32 = gpus.iter().map(|(_, c)| c).sum();
    if workers == 0 {
        return Err(Failure::runtime(anyhow!(
            "the job has no GPU in its allocation"
        )));
    }
    let rate = gang_rate(&table, &job_type, &gpus)? * a.time_scale;

    let checkpoint = match (&a.checkpoint, job_id) {
        (Some(p), _) => p.clone(),
        (None, Some(id)) => std::path::PathBuf::from(format!("hadar-checkpoint-{id}")),
        (None, None) => std::path::PathBuf::from("hadar-checkpoint"),
    };
    let resumed = read_checkpoint(&checkpoint).map_err(Failure::runtime)?;
    let total = a.steps as f64;
    let mut steps = resumed.min(total);
    let gpu_words: Vec<String> = gpus.iter().map(|(t, c)| format!("{t}:{c}")).collect();
    println!(
        "hadar-emulate: job type {job_type}, GPUs {}, rate {rate:.4} steps/s, resuming at {steps} of {total} steps",
        gpu_words.join(",")
    );
    let report = |steps: f64, r: f64| {
        if let Some(id) = job_id
            && a.report
        {
            let text = Progress {
                steps: steps.floor(),
                rate: r,
            }
            .encode();
            if let Err(e) = slurm.set_comment(id, &text) {
                eprintln!("hadar-emulate: cannot report progress: {e}");
            }
        }
    };
    report(steps, rate);
    let started = Instant::now();
    let mut last_report = Instant::now();
    let start_steps = steps;
    while steps < total {
        std::thread::sleep(Duration::from_millis(20));
        if CHECKPOINT_ASKED.load(Ordering::SeqCst) {
            let done = steps.floor();
            write_checkpoint(&checkpoint, done).map_err(Failure::runtime)?;
            report(done, rate);
            println!("hadar-emulate: checkpoint at {done} steps; waiting to be requeued");
            let _ = std::io::stdout().flush();
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        steps = (start_steps + rate * started.elapsed().as_secs_f64()).min(total);
        if last_report.elapsed().as_secs_f64() >= a.report_every {
            report(steps, rate);
            last_report = Instant::now();
        }
    }
    write_checkpoint(&checkpoint, total).map_err(Failure::runtime)?;
    report(total, rate);
    println!("hadar-emulate: completed {total} steps");
    Ok(())
}

/// The GPUs the job runs on, per type: `--gpus` when given, else those Slurm allocated to
/// job `job_id` (asked again for a few seconds while Slurm lists none).
fn job_gpus(
    slurm: &Slurm,
    spec: Option<&str>,
    job_id: Option<u64>,
) -> Result<Vec<(String, u32)>, Failure> {
    Ok(match spec {
        Some(spec) => parse_gpus(spec)
            .ok_or_else(|| Failure::input(anyhow!("--gpus {spec}: expected TYPE:N[,TYPE:N...]")))?,
        None => {
            let id = job_id.ok_or_else(|| {
                Failure::input(anyhow!(
                    "not inside a Slurm job (no SLURM_JOB_ID) and no --gpus given"
                ))
            })?;
            let job = read_allocation(slurm, id)?;
            let mut per_type: Vec<(String, u32)> = Vec::new();
            for (_, t, c) in job.gpu_parts() {
                match per_type.iter_mut().find(|(u, _)| *u == t) {
                    Some(e) => e.1 += c,
                    None => per_type.push((t, c)),
                }
            }
            per_type
        }
    })
}

/// How long the job waits for slurmctld to answer before it gives up: a controller being
/// restarted (or failing over) is away for seconds, and the job has done nothing yet.
const CONTROLLER_PATIENCE: Duration = Duration::from_secs(90);

/// How long the job asks again while Slurm lists it without its GPU detail.
const DETAIL_PATIENCE: Duration = Duration::from_secs(10);

/// Job `id` as Slurm lists it once its GPUs are shown. Right after a requeued job restarts,
/// the controller has been seen to list it without its GPU detail for a moment, and a job
/// can start just as slurmctld is restarted: both are asked again, each for a bounded time,
/// so that neither fails a job that has done nothing wrong.
fn read_allocation(slurm: &Slurm, id: u64) -> Result<hadar_slurm::SlurmJob, Failure> {
    let started = Instant::now();
    let mut told_away = false;
    let mut first_listed: Option<Instant> = None;
    loop {
        match slurm.job(id) {
            Ok(Some(job)) => {
                let listed = *first_listed.get_or_insert_with(Instant::now);
                if !job.gpu_parts().is_empty() || listed.elapsed() >= DETAIL_PATIENCE {
                    return Ok(job);
                }
            }
            Ok(None) => return Err(Failure::runtime(anyhow!("Slurm does not know job {id}"))),
            Err(e) if controller_away(&e) && started.elapsed() < CONTROLLER_PATIENCE => {
                if !told_away {
                    eprintln!("hadar-emulate: waiting for slurmctld to answer: {e}");
                    told_away = true;
                }
            }
            Err(e) => return Err(Failure::runtime(e)),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether a failed Slurm command may succeed when asked again: it ran but failed or timed
/// out (a controller away), not one that cannot run at all.
fn controller_away(e: &hadar_slurm::SlurmError) -> bool {
    use hadar_slurm::{CommandError, SlurmError};
    matches!(
        e,
        SlurmError::Command(CommandError::Failed { .. } | CommandError::Timeout { .. })
    )
}

/// Steps/s of a job of `job_type` on `gpus` ([`hadar_formats::ThroughputTable::gang_rate`]).
fn gang_rate(
    table: &hadar_formats::ThroughputTable,
    job_type: &str,
    gpus: &[(String, u32)],
) -> Result<f64, Failure> {
    table.gang_rate(job_type, gpus).map_err(|t| {
        let workers: u32 = gpus.iter().map(|(_, c)| c).sum();
        Failure::runtime(anyhow!(
            "{job_type} has no measured rate on {t} with {workers} workers"
        ))
    })
}

/// One copy of a forked job, under the fork-runner contract.
fn fork_copy(
    a: &EmulateArgs,
    table: &hadar_formats::ThroughputTable,
    job_type: &str,
    out: &Path,
) -> Result<(), Failure> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let gpus: Vec<(String, u32)> = match (&a.gpus, env("HADAR_GPU_TYPE"), env("HADAR_GPUS")) {
        (Some(spec), _, _) => parse_gpus(spec)
            .ok_or_else(|| Failure::input(anyhow!("--gpus {spec}: expected TYPE:N[,TYPE:N...]")))?,
        (None, Some(t), Some(n)) => parse_gpus(&format!("{t}:{n}")).ok_or_else(|| {
            Failure::input(anyhow!(
                "HADAR_GPU_TYPE={t} HADAR_GPUS={n}: not a GPU type and count"
            ))
        })?,
        _ => {
            return Err(Failure::input(anyhow!(
                "a forked copy needs --gpus or HADAR_GPU_TYPE and HADAR_GPUS (hadar serve sets them)"
            )));
        }
    };
    let rate = gang_rate(table, job_type, &gpus)? * a.time_scale;
    let number = |k: &str| -> Result<Option<f64>, Failure> {
        match env(k) {
            None => Ok(None),
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(Some)
                .ok_or_else(|| Failure::input(anyhow!("{k}={v} is not a non-negative number"))),
        }
    };
    let budget = number("HADAR_STEP_BUDGET")?
        .unwrap_or(a.steps as f64)
        .floor();
    let done_before = number("HADAR_STEPS_DONE")?.unwrap_or(0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let within_deadline = match number("HADAR_DEADLINE")? {
        // Half a second is kept for writing the checkpoint.
        Some(d) => (rate * (d - now - 0.5).max(0.0)).floor(),
        None => f64::INFINITY,
    };
    let steps = budget.min(within_deadline).max(0.0);
    std::thread::sleep(Duration::from_secs_f64(steps / rate));
    write_safetensors(out, done_before + steps).map_err(Failure::runtime)?;
    let steps_file = env("HADAR_STEPS_FILE")
        .ok_or_else(|| Failure::input(anyhow!("HADAR_STEPS_FILE is not set")))?;
    std::fs::write(&steps_file, format!("{steps}\n"))
        .with_context(|| format!("writing {steps_file}"))
        .map_err(Failure::runtime)?;
    let gpu_words: Vec<String> = gpus.iter().map(|(t, c)| format!("{t}:{c}")).collect();
    println!(
        "hadar-emulate: copy {} of round {}: {steps} steps on {} at {rate:.4} steps/s",
        env("HADAR_FORK_INDEX").unwrap_or_default(),
        env("HADAR_ROUND").unwrap_or_default(),
        gpu_words.join(",")
    );
    Ok(())
}

/// Writes a one-tensor safetensors file (`progress`, F64, shape [1]) atomically.
fn write_safetensors(path: &Path, value: f64) -> anyhow::Result<()> {
    let mut header = r#"{"progress":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#.to_string();
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&value.to_le_bytes());
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

fn parse_gpus(spec: &str) -> Option<Vec<(String, u32)>> {
    spec.split(',')
        .map(|item| {
            let (t, n) = item.split_once(':')?;
            Some((t.to_string(), n.parse().ok().filter(|n| *n > 0)?))
        })
        .collect()
}

fn signal_number(name: &str) -> Option<libc::c_int> {
    Some(match name.trim_start_matches("SIG") {
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "INT" => libc::SIGINT,
        "HUP" => libc::SIGHUP,
        _ => return None,
    })
}

fn read_checkpoint(path: &Path) -> anyhow::Result<f64> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let steps: f64 = text
                .trim()
                .strip_prefix("steps=")
                .and_then(|s| s.parse().ok())
                .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                .with_context(|| format!("checkpoint {} is not `steps=N`", path.display()))?;
            Ok(steps)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0.0),
        Err(e) => Err(e).with_context(|| format!("reading checkpoint {}", path.display())),
    }
}

/// Writes the checkpoint atomically (a temporary file renamed over it).
fn write_checkpoint(path: &Path, steps: f64) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("steps={steps}\n"))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_gpu_specs_parse() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ck");
        assert_eq!(read_checkpoint(&p).unwrap(), 0.0);
        write_checkpoint(&p, 42.0).unwrap();
        assert_eq!(read_checkpoint(&p).unwrap(), 42.0);
        std::fs::write(&p, "garbage").unwrap();
        assert!(read_checkpoint(&p).is_err());
        assert_eq!(
            parse_gpus("v100:2,k80:2"),
            Some(vec![("v100".into(), 2), ("k80".into(), 2)])
        );
        assert_eq!(parse_gpus("v100"), None);
    }

    #[test]
    fn copy_checkpoints_are_valid_safetensors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.safetensors");
        write_safetensors(&p, 1234.0).unwrap();
        let c = hadar_average::Checkpoint::open(&p).unwrap();
        assert!(c.header().tensor("progress").is_some());
        let b = std::fs::read(&p).unwrap();
        assert_eq!(
            f64::from_le_bytes(b[b.len() - 8..].try_into().unwrap()),
            1234.0
        );
    }
}
