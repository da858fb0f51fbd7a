//! What the benchmarks on the test cluster share (`hadar-load`, `hadar-scale`): bursts of
//! submissions from parallel submitters, the queue, quantiles, the daemon's log lines and
//! `sdiag`'s RPC counts.

use crate::{Testbed, TestbedError};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The value at quantile `q` of sorted samples (nearest rank); NaN for none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `n=.. median .. p99 .. max ..` of `v` (sorted in place).
pub fn summary(v: &mut [f64]) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "n={} median {:.2} p99 {:.2} max {:.2}",
        v.len(),
        quantile(v, 0.5),
        quantile(v, 0.99),
        v.last().copied().unwrap_or(f64::NAN)
    )
}

/// What a burst gave: each accepted submission's wall time (ms) and job id, and the
/// failures' messages.
#[derive(Debug, Default)]
pub struct Burst {
    pub ms: Vec<f64>,
    pub ids: Vec<u32>,
    pub failures: Vec<String>,
}

/// Submits `n` jobs from `k` threads, job `i` with the `sbatch` arguments and script
/// `job(i)` gives.
pub fn burst(
    bed: &Testbed,
    n: usize,
    k: usize,
    job: impl Fn(usize) -> (Vec<String>, String) + Sync,
) -> Burst {
    let next = Mutex::new(0usize);
    let out = Mutex::new(Burst::default());
    std::thread::scope(|s| {
        for _ in 0..k {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut i = next.lock().unwrap();
                        if *i >= n {
                            return;
                        }
                        *i += 1;
                        *i - 1
                    };
                    let (args, script) = job(i);
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let t = Instant::now();
                    let sub = bed.sbatch(&args, Some(&script));
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    let mut out = out.lock().unwrap();
                    match sub.job_id.filter(|_| sub.ok) {
                        Some(id) => {
                            out.ms.push(ms);
                            out.ids.push(id);
                        }
                        None => out.failures.push(sub.stderr),
                    }
                }
            });
        }
    });
    out.into_inner().unwrap()
}

/// Jobs in Slurm's queue: `(id, state, reason)`.
pub fn queue(bed: &Testbed) -> Result<Vec<(String, String, String)>, TestbedError> {
    let out = bed.client("squeue", &["-h", "-o", "%i %T %r"])?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((
                w.next()?.to_string(),
                w.next()?.to_string(),
                w.next().unwrap_or("").to_string(),
            ))
        })
        .collect())
}

/// Cancels every job and waits (up to `timeout`) until the queue is empty.
pub fn cancel_and_wait(bed: &Testbed, timeout: Duration) -> Result<(), TestbedError> {
    bed.cancel_all()?;
    let deadline = Instant::now() + timeout;
    while !queue(bed)?.is_empty() {
        if Instant::now() > deadline {
            return Err(TestbedError::Timeout(format!(
                "the queue did not empty within {timeout:?} of scancel"
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

/// The number `key=value` of a log line.
pub fn log_number(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// Starts `hadar serve` from `hadar` on the test cluster with a config of its own (written to
/// `etc/NAME.toml`: the `gpu` partition managed, `round_s` rounds, the state in
/// `state-NAME.db`, started afresh), logging at info level to `log`.
pub fn start_serve(
    bed: &Testbed,
    hadar: &Path,
    name: &str,
    round_s: f64,
    log: &Path,
) -> std::io::Result<Child> {
    start_serve_with(bed, hadar, name, round_s, log, "")
}

/// [`start_serve`] with more `[sidecar]` lines (`key = value\n` each) in the config.
pub fn start_serve_with(
    bed: &Testbed,
    hadar: &Path,
    name: &str,
    round_s: f64,
    log: &Path,
    sidecar: &str,
) -> std::io::Result<Child> {
    let config = bed.path(&format!("etc/{name}.toml"));
    let state = bed.path(&format!("state-{name}.db"));
    let _ = std::fs::remove_file(&state);
    let text = format!(
        "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\nslurm_conf = \"{conf}\"\n\n\
         [sidecar]\nsocket = \"{sock}\"\nstate = \"{state}\"\nround_seconds = {round_s}\ncommand_timeout_seconds = 120\nlease_seconds = 600\n{sidecar}",
        conf = bed.path("etc/slurm.conf").display(),
        sock = bed.path("run/hadar.sock").display(),
        state = state.display(),
    );
    std::fs::write(&config, text)?;
    Command::new(hadar)
        .args(["serve", "--config"])
        .arg(&config)
        .env("HADAR_LOG", "info")
        .env("NO_COLOR", "1")
        .env("SLURM_CONF", bed.path("etc/slurm.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
}

/// The counts of `sdiag`'s "Remote Procedure Call statistics by message type" section:
/// lines `REQUEST_JOB_INFO ( 2003) count:12 ave_time:...`.
pub fn rpc_counts(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut in_section = false;
    for line in text.lines() {
        if line.starts_with("Remote Procedure Call statistics by message type") {
            in_section = true;
            continue;
        }
        if line.starts_with("Remote Procedure Call statistics by user") {
            break;
        }
        if !in_section {
            continue;
        }
        let name = line.split_whitespace().next().unwrap_or("");
        let count = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("count:"))
            .and_then(|c| c.parse().ok());
        if let Some(count) = count {
            out.insert(name.to_string(), count);
        }
    }
    out
}

/// Each type's count in `after` less that in `before`, the types that grew.
pub fn rpc_delta(
    after: &BTreeMap<String, u64>,
    before: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(*before.get(k).unwrap_or(&0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdiags_rpc_section_is_read_by_type() {
        let text = "Remote Procedure Call statistics by message type\n\
            \tREQUEST_JOB_INFO                        ( 2003) count:12     ave_time:1000   total_time:12000\n\
            \tREQUEST_UPDATE_JOB                      ( 3001) count:3      ave_time:50     total_time:150\n\
            \n\
            Remote Procedure Call statistics by user\n\
            \troot            (       0) count:15     ave_time:800    total_time:12150\n";
        let c = rpc_counts(text);
        assert_eq!(c.get("REQUEST_JOB_INFO"), Some(&12));
        assert_eq!(c.get("REQUEST_UPDATE_JOB"), Some(&3));
        assert_eq!(c.len(), 2, "the by-user section is not counted: {c:?}");
    }

    #[test]
    fn quantiles_are_nearest_rank_and_log_numbers_are_read() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.99), 4.0);
        assert!(quantile(&[], 0.5).is_nan());
        let line = "INFO round done round=3 read_ms=12.5 slurm_bytes=900";
        assert_eq!(log_number(line, "read_ms"), Some(12.5));
        assert_eq!(log_number(line, "slurm_bytes"), Some(900.0));
        assert_eq!(log_number(line, "total_ms"), None);
    }
}
