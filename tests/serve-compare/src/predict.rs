//! `--predict`: does the simulator predict the test cluster?
//!
//! For each seed, the seeded workload runs on the test cluster three ways: Slurm alone (each
//! job asking for its fastest type), `hadar serve` with Hadar, and `hadar serve` with HadarE
//! (every job `fork=yes`). Each run is recorded (per job: Slurm's submit, start and end
//! times; HadarE's copy jobs; the daemon's config; the machine's load) as one JSON line per
//! seed in `--record FILE`. Then the same jobs, submitted at the same moments, are played
//! through the simulator with the test cluster's model ([`crate::model`]), and the command
//! prints per job the predicted and measured JCT, the makespans, and the errors, per seed and
//! over the seeds. `--from FILE` recomputes the table from a record without the cluster;
//! `--model KEY=VALUE,...` changes the model's figures ([`Timing`]).

use crate::accuracy::{self, RunErrors};
use crate::model::{self, Scheduler, Timing};
use crate::site_scenario::{self, SiteCapture};
use crate::{Args, TraceJob, WorkJob};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// What `--predict` was asked.
#[derive(Clone, Debug)]
pub struct PredictArgs {
    pub on: bool,
    pub seeds: Vec<u64>,
    pub record: Option<PathBuf>,
    pub from: Option<PathBuf>,
    pub timing: Timing,
    /// `--schedulers slurm,hadar,hadare`: which runs to make (all three by default).
    pub schedulers: Vec<Scheduler>,
    /// `--first-round-as-measured`: a diagnostic; the daemon's first round sees as many jobs
    /// as it started on the cluster ([`read_seeing`]).
    pub first_round_as_measured: bool,
    /// `--site`: the runs obey a site's rules ([`site_scenario`]), captured before them.
    pub site: bool,
}

impl Default for PredictArgs {
    fn default() -> Self {
        PredictArgs {
            on: false,
            seeds: vec![1, 2, 3, 4],
            record: None,
            from: None,
            timing: Timing::default(),
            schedulers: Scheduler::ALL.to_vec(),
            first_round_as_measured: false,
            site: false,
        }
    }
}

/// `--seeds 1,2,3`.
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, String> {
    let seeds: Result<Vec<u64>, _> = s.split(',').map(|x| x.trim().parse()).collect();
    match seeds {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(format!(
            "--seeds {s}: give whole numbers separated by commas"
        )),
    }
}

/// `--schedulers slurm,hadar`.
pub fn parse_schedulers(s: &str) -> Result<Vec<Scheduler>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim) {
        let who = Scheduler::ALL
            .into_iter()
            .find(|w| w.as_str() == item)
            .ok_or_else(|| format!("--schedulers {item}: give slurm, hadar or hadare"))?;
        if !out.contains(&who) {
            out.push(who);
        }
    }
    Ok(out)
}

/// `--model slurm_start_s=2,hadar_start_s=1.5`: sets figures of the model by name.
pub fn set_timing(t: &mut Timing, s: &str) -> Result<(), String> {
    for item in s.split(',').filter(|x| !x.trim().is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("--model {item}: write KEY=SECONDS"))?;
        let v: f64 = v
            .trim()
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite() && *x >= 0.0)
            .ok_or_else(|| format!("--model {item}: give a number of seconds, at least 0"))?;
        let slot = match k.trim() {
            "slurm_start_s" => &mut t.slurm_start_s,
            "slurm_round_s" => &mut t.slurm_round_s,
            "hadar_round_s" => &mut t.hadar_round_s,
            "hadar_restart_s" => &mut t.hadar_restart_s,
            "hadar_start_s" => &mut t.hadar_start_s,
            "hadar_read_s" => &mut t.hadar_read_s,
            "submit_spacing_s" => &mut t.submit_spacing_s,
            "hadare_round_s" => &mut t.hadare_round_s,
            "hadare_copy_startup_s" => &mut t.hadare_copy_startup_s,
            "hadare_finish_s" => &mut t.hadare_finish_s,
            other => return Err(format!("--model: unknown figure {other}")),
        };
        *slot = v;
    }
    Ok(())
}

/// One job's times in Slurm (seconds since the epoch).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobTimes {
    pub id: u64,
    /// Slurm's `SubmitTime`: the time of the job's last requeue if it was requeued (Slurm
    /// resets it then), so not its arrival; see [`JobTimes::first_submit`].
    pub submit: f64,
    pub start: f64,
    pub end: f64,
    pub restarts: u32,
    /// When `sbatch` returned, by this program's clock (seconds since the epoch, to the
    /// microsecond); Slurm's `SubmitTime` has whole seconds only. Absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted: Option<f64>,
}

impl JobTimes {
    /// When the job was first submitted, in Slurm's whole seconds. Slurm sets `SubmitTime`
    /// to the time of a job's last requeue, so a job the daemon moved would seem to arrive
    /// at its last move and its JCT would count from there. For such a job the harness's own
    /// submission clock, truncated to the second as Slurm's times are, is its arrival. It is
    /// never earlier than Slurm's stamp of a job not requeued (`sbatch` returns after it).
    pub fn first_submit(&self) -> f64 {
        match self.submitted {
            Some(at) => self.submit.min(at.floor()),
            None => self.submit,
        }
    }
}

/// One of HadarE's copy jobs (`hadar-fork-JOB-rROUND`), as Slurm last showed it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CopyJob {
    pub name: String,
    pub start: Option<f64>,
    pub end: Option<f64>,
    pub comment: Option<String>,
}

/// The logical job a copy job's name belongs to.
pub fn copy_of(name: &str) -> Option<u64> {
    hadar_daemon::fork::copy_job_of(name).map(|(job, _)| job)
}

/// Keeps what Slurm shows of a copy job (its het components share a name): the earliest
/// start, the latest end, the round report.
pub fn note_copy(
    copies: &mut std::collections::BTreeMap<String, CopyJob>,
    j: &hadar_slurm::SlurmJob,
) {
    let c = copies.entry(j.name.clone()).or_insert(CopyJob {
        name: j.name.clone(),
        start: None,
        end: None,
        comment: None,
    });
    if let Some(s) = j
        .start_time
        .filter(|_| j.status != hadar_slurm::JobStatus::Pending)
    {
        let s = s as f64;
        c.start = Some(c.start.map_or(s, |x| x.min(s)));
    }
    if let Some(e) = j.end_time.filter(|_| j.status.is_terminal()) {
        let e = e as f64;
        c.end = Some(c.end.map_or(e, |x| x.max(e)));
    }
    if let Some(m) = j.comment.as_ref().filter(|m| m.starts_with("hadar-round:")) {
        c.comment = Some(m.clone());
    }
}

/// One scheduler's run of a seed.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Measured {
    pub scheduler: String,
    pub times: Vec<JobTimes>,
    pub copies: Vec<CopyJob>,
    /// The daemon's config file (empty for Slurm alone).
    pub config: String,
    /// `/proc/loadavg` before and after the run.
    pub load: (String, String),
}

/// One seed: the workload, the cluster and the three runs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SeedRecord {
    pub seed: u64,
    pub time_scale: f64,
    pub cluster: Vec<(String, Vec<(String, u32)>)>,
    pub work: Vec<WorkJob>,
    pub runs: Vec<Measured>,
    /// With `--site`: the site the runs obeyed, as `hadar site capture` wrote it before them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<SiteCapture>,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs one seed's workload three ways on the cluster.
fn measure_seed(
    bed: &hadar_slurm_testbed::Testbed,
    a: &Args,
    seed: u64,
) -> Result<SeedRecord, String> {
    let work = crate::workload(a.jobs, seed, a.time_scale);
    let text = bed
        .client("scontrol", &["show", "node"])
        .map_err(|e| e.to_string())?;
    let cluster = hadar_slurm::node::parse_nodes(&text)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|n| (n.name, n.gpus))
        .collect();
    let trace: Vec<TraceJob> = work
        .iter()
        .map(|j| TraceJob {
            job_type: j.job_type.clone(),
            workers: j.workers,
            steps: j.steps,
            fastest_s: 0.0,
        })
        .collect();
    let site = match a.predict.site {
        true => Some(site_scenario::set_up(bed, &a.hadar, &capture_config(bed)?)?),
        false => None,
    };
    let extra = match site {
        Some(_) => site_scenario::submit_args(),
        None => Vec::new(),
    };
    let mut runs = Vec::new();
    for &who in &a.predict.schedulers {
        let before = loadavg();
        eprintln!("seed {seed}: {} (load {before})", who.as_str());
        let (times, copies, config) = match who {
            Scheduler::Slurm => {
                let r = crate::run(bed, a, &work, false, &extra)
                    .map_err(|e| format!("Slurm alone: {e}"))?;
                (r.times, Vec::new(), String::new())
            }
            Scheduler::Hadar | Scheduler::HadarE => {
                let forked = who == Scheduler::HadarE;
                let round = if forked {
                    a.predict.timing.hadare_round_s
                } else {
                    a.predict.timing.hadar_round_s
                };
                let run = crate::PolicyRun {
                    forked,
                    round_s: round,
                    seed,
                    submit_args: &extra,
                };
                let r = crate::run_policy(bed, a, &trace, a.time_scale, &run)
                    .map_err(|e| format!("{}: {e}", who.as_str()))?;
                (r.times, r.copies, r.config)
            }
        };
        runs.push(Measured {
            scheduler: who.as_str().to_string(),
            times,
            copies,
            config,
            load: (before, loadavg()),
        });
    }
    Ok(SeedRecord {
        seed,
        time_scale: a.time_scale,
        cluster,
        work,
        runs,
        site,
    })
}

/// A daemon config for `hadar site capture` to read the test cluster's Slurm by.
fn capture_config(bed: &hadar_slurm_testbed::Testbed) -> Result<PathBuf, String> {
    let path = bed.path("etc/site-capture.toml");
    let text = crate::daemon_config::DaemonSettings {
        slurm_conf: &bed.path("etc/slurm.conf"),
        socket: &bed.path("run/hadar.sock"),
        state: &bed.path("state-capture.db"),
        round_s: 3.0,
        throughput_scale: 1.0,
        look_ahead: true,
        policy: hadar_daemon::config::PolicyChoice::HADAR,
        fork: None,
    }
    .render();
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Runs every seed, appending each record to `path` as it is done.
fn measure(a: &Args, path: &std::path::Path) -> Result<Vec<SeedRecord>, String> {
    let Some(bed) = crate::start_testbed(a.predict.site) else {
        return Err("no test cluster".into());
    };
    let mut out = Vec::new();
    for &seed in &a.predict.seeds {
        let rec = measure_seed(&bed, a, seed);
        if a.predict.site {
            site_scenario::tear_down(&bed);
        }
        let rec = rec?;
        let line = serde_json::to_string(&rec).map_err(|e| e.to_string())?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        writeln!(f, "{line}").map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(rec);
    }
    Ok(out)
}

/// Reads a record written by [`measure`].
fn read_records(path: &std::path::Path) -> Result<Vec<SeedRecord>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// One scheduler's measured and predicted figures on one seed.
pub struct Compared {
    pub who: Scheduler,
    pub measured_jct: Vec<f64>,
    pub predicted_jct: Vec<f64>,
    pub measured_makespan: f64,
    pub predicted_makespan: f64,
    pub errors: RunErrors,
    /// Jobs in the first round: (predicted, measured), the measured ones being those that
    /// Slurm started within a second of the run's first start.
    pub first_round: (usize, usize),
    /// Jobs Slurm requeued: their `StartTime` is their last start, so the measured first
    /// round may have held more jobs than it counts.
    pub requeued: usize,
}

/// Measured JCTs (end - first submission), arrivals (from the run's first submission) and
/// makespan, from each job's first submission ([`JobTimes::first_submit`]).
pub fn measured_figures(times: &[JobTimes]) -> (Vec<f64>, Vec<f64>, f64) {
    let first = times
        .iter()
        .map(JobTimes::first_submit)
        .fold(f64::INFINITY, f64::min);
    let last = times
        .iter()
        .map(|t| t.end)
        .fold(f64::NEG_INFINITY, f64::max);
    (
        times.iter().map(|t| t.end - t.first_submit()).collect(),
        times.iter().map(|t| t.first_submit() - first).collect(),
        last - first,
    )
}

/// The makespan and the average JCT of a run, from each job's first submission.
pub fn makespan_and_mean_jct(times: &[JobTimes]) -> (f64, f64) {
    let (jct, _, makespan) = measured_figures(times);
    (makespan, jct.iter().sum::<f64>() / jct.len().max(1) as f64)
}

/// Arrivals to the sub-second, from the first submission: the harness's own submission
/// times when the record has them for every job; else Slurm's whole-second submit times,
/// with jobs sharing a second spread in submission (job id) order `spacing_s` apart.
pub fn arrivals(times: &[JobTimes], spacing_s: f64) -> Vec<f64> {
    if let Some(own) = times
        .iter()
        .map(|t| t.submitted)
        .collect::<Option<Vec<f64>>>()
    {
        let first = own.iter().copied().fold(f64::INFINITY, f64::min);
        return own.iter().map(|s| s - first).collect();
    }
    let first = times.iter().map(|t| t.submit).fold(f64::INFINITY, f64::min);
    times
        .iter()
        .map(|t| {
            let before = times
                .iter()
                .filter(|u| u.submit == t.submit && u.id < t.id)
                .count();
            t.submit - first + before as f64 * spacing_s
        })
        .collect()
}

/// Jobs Slurm started within a second of the run's first start: the first round's (the
/// daemon's next round comes at least `MIN_WOKEN_GAP`, 2 s, later).
pub fn started_first(times: &[JobTimes]) -> usize {
    let first = times.iter().map(|t| t.start).fold(f64::INFINITY, f64::min);
    times.iter().filter(|t| t.start <= first + 1.0).count()
}

/// `--first-round-as-measured`: the read delay after the first arrival at which the first
/// round sees exactly `seen` jobs (halfway between the last seen and the first unseen).
/// A diagnostic, not a prediction: it takes from the measurement what the model should
/// know, to show how much of the error that one race accounts for.
pub fn read_seeing(arrivals: &[f64], seen: usize) -> f64 {
    let mut a = arrivals.to_vec();
    a.sort_by(f64::total_cmp);
    let Some(&first) = a.first() else { return 0.0 };
    let last_seen = a[seen.clamp(1, a.len()) - 1];
    match a.get(seen.max(1)) {
        Some(&unseen) => (last_seen + unseen) / 2.0 - first,
        None => last_seen - first,
    }
}

/// Predicts one seed's three runs and compares.
fn compare(
    rec: &SeedRecord,
    timing: &Timing,
    as_measured: bool,
    schedulers: &[Scheduler],
) -> Result<Vec<Compared>, String> {
    let cluster = model::cluster_of(&rec.cluster)?;
    let mut out = Vec::new();
    for run in &rec.runs {
        let who = Scheduler::ALL
            .into_iter()
            .find(|s| s.as_str() == run.scheduler)
            .ok_or_else(|| format!("seed {}: unknown scheduler {}", rec.seed, run.scheduler))?;
        if !schedulers.contains(&who) {
            continue;
        }
        let (jct, mut arrivals, makespan) = measured_figures(&run.times);
        // Only the daemon's rounds see the order within a second: Slurm alone's model
        // plays in 1 s steps.
        let mut timing = timing.clone();
        if who != Scheduler::Slurm {
            arrivals = self::arrivals(&run.times, timing.submit_spacing_s);
            if as_measured {
                let read = read_seeing(&arrivals, started_first(&run.times));
                timing.hadar_read_s = (read - model::wake_settle(&run.config)).max(0.0);
            }
        }
        let site = match &rec.site {
            Some(capture) => Some(site_of(capture, run, rec.work.len())?),
            None => None,
        };
        let by = model::RunBy {
            who,
            config: &run.config,
            site,
        };
        let p = model::predict(&rec.work, &arrivals, rec.time_scale, &cluster, &timing, by)
            .map_err(|e| format!("seed {}: {e}", rec.seed))?;
        let errors = accuracy::run_errors(p.makespan_s, makespan, &p.jct_s, &jct)
            .map_err(|e| format!("seed {} {}: {e}", rec.seed, who.as_str()))?;
        out.push(Compared {
            who,
            measured_jct: jct,
            predicted_jct: p.jct_s,
            measured_makespan: makespan,
            predicted_makespan: p.makespan_s,
            errors,
            first_round: (p.first_round_jobs, started_first(&run.times)),
            requeued: run.times.iter().filter(|t| t.restarts > 0).count(),
        });
    }
    Ok(out)
}

/// The captured site for `run`'s jobs, second 0 at its first submission, priority weighing
/// as its daemon's `[hadar]` says (Slurm alone's run has no daemon: the default).
fn site_of(
    capture: &SiteCapture,
    run: &Measured,
    jobs: usize,
) -> Result<hadar_daemon::site::simulated::SimulatedSite, String> {
    let config = hadar_daemon::DaemonConfig::parse("the run's daemon config", &run.config)
        .map_err(|e| e.to_string())?;
    let epoch = run
        .times
        .iter()
        .map(JobTimes::first_submit)
        .fold(f64::INFINITY, f64::min);
    capture.simulated(jobs, epoch, config.hadar.priority_strength)
}

/// The value below which a fraction `q` of `v` lies (nearest rank).
fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).copied()
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The model's figures as this seed's runs show them (medians over jobs; see
/// docs/prediction.md for what each is).
pub fn observed_timing(rec: &SeedRecord) -> Vec<(&'static str, Option<f64>)> {
    let table = hadar_formats::embedded::throughputs().ok();
    let run = |name: &str| rec.runs.iter().find(|r| r.scheduler == name);
    let mut out = Vec::new();
    if let (Some(slurm), Some(table)) = (run("slurm"), table.as_ref()) {
        let ends: Vec<f64> = slurm.times.iter().map(|t| t.end).collect();
        let mut extra = Vec::new();
        for (t, j) in slurm.times.iter().zip(&rec.work) {
            let rate = table
                .resolve_job_type(&j.job_type)
                .and_then(|n| table.rate(n, &j.fastest, j.workers));
            let Some(rate) = rate else { continue };
            let train = j.steps as f64 / (rate * rec.time_scale);
            // Free since the last end before its start (or its submission).
            let free = ends
                .iter()
                .copied()
                .filter(|e| *e <= t.start)
                .fold(t.first_submit(), f64::max);
            extra.push(t.end - free - train);
        }
        out.push(("slurm_start_s", median(extra)));
    }
    if let Some(h) = run("hadar") {
        let first = h
            .times
            .iter()
            .map(JobTimes::first_submit)
            .fold(f64::INFINITY, f64::min);
        let starts = h.times.iter().map(|t| t.start - first).collect();
        out.push(("hadar first start after submission (min)", {
            let v: Vec<f64> = starts;
            v.into_iter().reduce(f64::min)
        }));
    }
    if let Some(e) = run("hadare") {
        let mut trained = Vec::new();
        // Slurm still shows an earlier run's copies for a few minutes (`MinJobAge`);
        // records made before the harness left them out hold them too.
        let ours =
            |c: &&CopyJob| copy_of(&c.name).is_some_and(|j| e.times.iter().any(|t| t.id == j));
        for c in e.copies.iter().filter(ours) {
            for part in c.comment.iter().flat_map(|m| m.split(';')) {
                // cK=ok:STEPS:SECONDS:EXIT
                if let Some((_, v)) = part.split_once('=')
                    && let Some(rest) = v.strip_prefix("ok:")
                    && let Some(secs) = rest.split(':').nth(1).and_then(|s| s.parse().ok())
                {
                    trained.push(secs);
                }
            }
        }
        let round = rec
            .runs
            .iter()
            .find(|r| r.scheduler == "hadare")
            .and_then(|r| hadar_daemon::DaemonConfig::parse("config", &r.config).ok())
            .map(|c| c.sidecar.round_seconds);
        // Copies whose step budget ran out train less than a round; those that ran to
        // their deadline are the top tenth.
        out.push((
            "hadare_copy_startup_s",
            round.zip(quantile(trained, 0.9)).map(|(r, m)| r - m),
        ));
        // The daemon counts a job's last copies at its next round, one round after they
        // started (a second or two after theirs: Slurm's times are whole seconds).
        let mut finish = Vec::new();
        for t in &e.times {
            let last = e
                .copies
                .iter()
                .filter(|c| copy_of(&c.name) == Some(t.id))
                .filter_map(|c| c.start)
                .reduce(f64::max);
            if let (Some(l), Some(r)) = (last, round) {
                finish.push(t.end - l - r);
            }
        }
        out.push(("hadare_finish_s", median(finish)));
    }
    out
}

fn print_seed(rec: &SeedRecord, cmp: &[Compared]) {
    println!(
        "\nseed {}: {} jobs, time scale {}; load before/after each run: {}",
        rec.seed,
        rec.work.len(),
        rec.time_scale,
        rec.runs
            .iter()
            .map(|r| format!("{} {} / {}", r.scheduler, r.load.0, r.load.1))
            .collect::<Vec<_>>()
            .join("; ")
    );
    print!("{:<4} {:<22}", "job", "type x GPUs");
    for c in cmp {
        print!(" {:>15}", format!("{} pred/meas", c.who.as_str()));
    }
    println!();
    for (i, j) in rec.work.iter().enumerate() {
        print!("{i:<4} {:<22}", format!("{} x{}", j.job_type, j.workers));
        for c in cmp {
            print!(
                " {:>15}",
                format!("{:.0}/{:.0}", c.predicted_jct[i], c.measured_jct[i])
            );
        }
        println!();
    }
    for c in cmp {
        println!(
            "{:<7} makespan predicted {:>5.0} s, measured {:>5.0} s ({:+.1}%); mean |JCT error| {:.1}%{}",
            c.who.as_str(),
            c.predicted_makespan,
            c.measured_makespan,
            c.errors.makespan_pct,
            c.errors.mean_abs_jct_pct,
            if c.who == Scheduler::Slurm {
                String::new()
            } else {
                format!(
                    "; jobs in the first round {} / {}{}",
                    c.first_round.0,
                    c.first_round.1,
                    match c.requeued {
                        0 => String::new(),
                        n => format!(
                            " (not counting {n} requeued jobs, whose StartTime is their last start)"
                        ),
                    }
                )
            }
        );
    }
    let observed = observed_timing(rec)
        .into_iter()
        .map(|(k, v)| format!("{k} {}", v.map_or("-".into(), |v| format!("{v:.1}"))))
        .collect::<Vec<_>>()
        .join(", ");
    println!("observed on this seed's runs: {observed}");
}

/// `--predict`: measure (or read `--from`), predict, print.
pub fn predict_mode(a: &Args) -> ExitCode {
    let records = match &a.predict.from {
        Some(path) => read_records(path),
        None => {
            let path = a.predict.record.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!(
                    "hadar-predict-{}.jsonl",
                    hadar_slurm_testbed::controller_port()
                ))
            });
            eprintln!("recording the runs in {}", path.display());
            measure(a, &path)
        }
    };
    let records = match records {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hadar-serve-compare: {e}");
            return ExitCode::FAILURE;
        }
    };
    let t = &a.predict.timing;
    println!(
        "model: Slurm {:?} time limits, {:?} layout, start {} s ({} s rounds); Hadar rounds {} s, restart {} s, start {} s, read {} s after a submission; submissions {} s apart within a second; HadarE rounds {} s, copy start-up {} s, finish {} s",
        t.slurm.time_limits,
        t.slurm.nodes,
        t.slurm_start_s,
        t.slurm_round_s,
        t.hadar_round_s,
        t.hadar_restart_s,
        t.hadar_start_s,
        t.hadar_read_s,
        t.submit_spacing_s,
        t.hadare_round_s,
        t.hadare_copy_startup_s,
        t.hadare_finish_s
    );
    let mut per: Vec<(Scheduler, Vec<RunErrors>)> =
        Scheduler::ALL.iter().map(|s| (*s, Vec::new())).collect();
    let mut json = Vec::new();
    for rec in &records {
        let cmp = match compare(
            rec,
            t,
            a.predict.first_round_as_measured,
            &a.predict.schedulers,
        ) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("hadar-serve-compare: {e}");
                return ExitCode::FAILURE;
            }
        };
        print_seed(rec, &cmp);
        for c in &cmp {
            if let Some((_, v)) = per.iter_mut().find(|(s, _)| *s == c.who) {
                v.push(c.errors);
            }
            json.push(serde_json::json!({
                "seed": rec.seed, "scheduler": c.who.as_str(),
                "makespan_s": {"predicted": c.predicted_makespan, "measured": c.measured_makespan},
                "avg_jct_s": {"measured": c.measured_jct.iter().sum::<f64>() / c.measured_jct.len() as f64,
                              "predicted": c.predicted_jct.iter().sum::<f64>() / c.predicted_jct.len() as f64},
                "makespan_error_pct": c.errors.makespan_pct,
                "mean_abs_jct_error_pct": c.errors.mean_abs_jct_pct,
            }));
        }
    }
    println!("\nover {} seeds:", records.len());
    for (who, runs) in &per {
        if let Some(s) = accuracy::summarise(runs) {
            println!(
                "{:<7} makespan |error| mean {:.1}%, max {:.1}%; mean |JCT error| {:.1}% -> {}",
                who.as_str(),
                s.mean_abs_makespan_pct,
                s.max_abs_makespan_pct,
                s.mean_abs_jct_pct,
                if accuracy::meets_aim(&s) {
                    "within the aim (10% / 15%)"
                } else {
                    "misses the aim (10% / 15%)"
                }
            );
        }
    }
    if a.json {
        println!("{}", serde_json::Value::Array(json));
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: u64, submit: f64, start: f64, submitted: Option<f64>) -> JobTimes {
        JobTimes {
            id,
            submit,
            start,
            end: start + 10.0,
            restarts: 0,
            submitted,
        }
    }

    #[test]
    fn arrivals_spread_a_second_in_submission_order_unless_the_record_has_its_own() {
        let whole = [
            t(12, 100.0, 101.0, None),
            t(10, 100.0, 101.0, None),
            t(13, 101.0, 103.0, None),
        ];
        let a = arrivals(&whole, 0.01);
        assert!(
            (a[0] - 0.01).abs() < 1e-12 && a[1] == 0.0 && a[2] == 1.0,
            "{a:?}"
        );
        let own = [
            t(1, 100.0, 101.0, Some(100.25)),
            t(2, 100.0, 101.0, Some(100.5)),
        ];
        assert_eq!(arrivals(&own, 0.01), vec![0.0, 0.25]);
        // Jobs started within a second of the first start were the first round's.
        assert_eq!(started_first(&whole), 2);
    }

    #[test]
    fn a_requeued_job_counts_from_its_first_submission_not_slurms_reset_submit_time() {
        // Seed 3 without the look-ahead on 26.05.3: job 1 was submitted at 0.3 s, moved three
        // times, and Slurm showed SubmitTime 95 s (its last requeue) and EndTime 107 s.
        let requeued = JobTimes {
            restarts: 3,
            end: 1107.0,
            ..t(1, 1095.0, 1095.0, Some(1000.3))
        };
        let stayed = JobTimes {
            end: 1037.0,
            ..t(2, 1000.0, 1001.0, Some(1000.31))
        };
        assert_eq!(requeued.first_submit(), 1000.0);
        assert_eq!(stayed.first_submit(), 1000.0);
        let (jct, arrivals, makespan) = measured_figures(&[requeued.clone(), stayed.clone()]);
        assert_eq!(jct, vec![107.0, 37.0]);
        assert_eq!(arrivals, vec![0.0, 0.0]);
        assert_eq!(makespan, 107.0);
        assert_eq!(makespan_and_mean_jct(&[requeued, stayed]), (107.0, 72.0));
        // A record without the harness's own clock has only Slurm's stamp.
        assert_eq!(t(3, 1095.0, 1095.0, None).first_submit(), 1095.0);
        // Slurm stamps a job before `sbatch` returns, so its second never follows ours.
        assert_eq!(t(4, 1000.0, 1001.0, Some(1000.99)).first_submit(), 1000.0);
    }

    #[test]
    fn the_read_that_sees_n_jobs_falls_between_the_nth_and_the_next() {
        let a = [0.0, 0.01, 0.02, 0.03];
        assert!((read_seeing(&a, 2) - 0.015).abs() < 1e-12);
        assert_eq!(read_seeing(&a, 4), 0.03);
        assert!((read_seeing(&a, 0) - 0.005).abs() < 1e-12);
        assert_eq!(read_seeing(&[], 3), 0.0);
    }

    /// The seeds of a record's text, one JSON line each.
    fn records_in(text: &str) -> Vec<SeedRecord> {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn slurm_alone_on_the_recorded_runs_is_predicted_only_without_time_limits() {
        use hadar_core::policies::slurm_backfill::SlurmOptions;
        let records = records_in(include_str!(
            "../../../docs/data/prediction-record-clean.jsonl"
        ));
        let run = |slurm: SlurmOptions| {
            let t = Timing {
                slurm,
                ..Timing::default()
            };
            records
                .iter()
                .flat_map(|r| compare(r, &t, false, &[Scheduler::Slurm]).unwrap())
                .collect::<Vec<_>>()
        };
        let summary = |c: &[Compared]| {
            let errors: Vec<RunErrors> = c.iter().map(|c| c.errors).collect();
            accuracy::summarise(&errors).unwrap()
        };
        let now = run(model::test_cluster_slurm());
        assert_eq!(now.len(), 4);
        assert!(now.iter().all(|c| c.who == Scheduler::Slurm));
        assert!(accuracy::meets_aim(&summary(&now)));
        let exact = run(SlurmOptions::default());
        assert!(!accuracy::meets_aim(&summary(&exact)));
        // Seed 1's 4-GPU job (job 4) waited on the cluster until n1 was free all at once,
        // 98 s; exact limits reserve n1 for it and predict it at half its JCT.
        let (m, p, x) = (
            now[0].measured_jct[4],
            now[0].predicted_jct[4],
            exact[0].predicted_jct[4],
        );
        assert!((p - m).abs() / m < 0.1, "{p} vs {m}");
        assert!(x < 0.6 * m, "{x} vs {m}");
    }

    #[test]
    fn the_fresh_hold_out_is_predicted_within_the_aim_for_all_three() {
        // Seeds 13-16, run after the model's figures were fixed (docs/prediction.md).
        let records = records_in(include_str!(
            "../../../docs/data/prediction-record-holdout-seeds13-16.jsonl"
        ));
        assert_eq!(records.len(), 4);
        let mut t = Timing::default();
        set_timing(&mut t, "hadare_round_s=30").unwrap();
        for who in [Scheduler::Slurm, Scheduler::Hadar, Scheduler::HadarE] {
            let errors: Vec<RunErrors> = records
                .iter()
                .flat_map(|r| compare(r, &t, false, &[who]).unwrap())
                .map(|c| c.errors)
                .collect();
            assert_eq!(errors.len(), 4, "{}", who.as_str());
            let summary = accuracy::summarise(&errors).unwrap();
            assert!(
                accuracy::meets_aim(&summary),
                "{}: {summary:?}",
                who.as_str()
            );
        }
    }

    /// The errors of `who`'s runs in `records`, each seed's.
    fn errors_of(records: &[SeedRecord], who: Scheduler) -> Vec<RunErrors> {
        let t = Timing::default();
        records
            .iter()
            .flat_map(|r| compare(r, &t, false, &[who]).unwrap())
            .map(|c| c.errors)
            .collect()
    }

    #[test]
    fn the_site_scenario_is_predicted_from_its_capture() {
        // `--predict --site`, seeds 1-4: a QOS GPU limit, a reservation and a partition set
        // DOWN, captured by `hadar site capture` before each seed (docs/prediction.md).
        let records = records_in(include_str!(
            "../../../docs/data/prediction-record-site-seeds1-4.jsonl"
        ));
        assert_eq!(records.len(), 4);
        assert!(records.iter().all(|r| r.site.is_some()));
        let slurm = accuracy::summarise(&errors_of(&records, Scheduler::Slurm)).unwrap();
        assert!(accuracy::meets_aim(&slurm), "Slurm alone: {slurm:?}");
        // Hadar: within the aim on seeds 1 and 2; on seeds 3 and 4 one job each was put on
        // K80s on the cluster and kept there, where the simulator's round did otherwise.
        let hadar = errors_of(&records, Scheduler::Hadar);
        assert!(accuracy::meets_aim(
            &accuracy::summarise(&hadar[..2]).unwrap()
        ));
        let all = accuracy::summarise(&hadar).unwrap();
        assert!(all.mean_abs_makespan_pct < 15.0, "{all:?}");
        assert!(all.mean_abs_jct_pct < 10.0, "{all:?}");
        // Without the capture the model predicts a cluster without the limit: far off.
        let bare: Vec<SeedRecord> = records
            .into_iter()
            .map(|r| SeedRecord { site: None, ..r })
            .collect();
        for who in [Scheduler::Slurm, Scheduler::Hadar] {
            let s = accuracy::summarise(&errors_of(&bare, who)).unwrap();
            assert!(s.mean_abs_makespan_pct > 20.0, "{}: {s:?}", who.as_str());
        }
    }

    #[test]
    fn a_copy_job_names_its_logical_job() {
        assert_eq!(copy_of("hadar-fork-255-r1"), Some(255));
        assert_eq!(copy_of("hadar-fork-7-r12"), Some(7));
        for other in [
            "hadar-fork-7",
            "hadar-fork-x-r1",
            "hadar-fork-7-rx",
            "cmp-7",
        ] {
            assert_eq!(copy_of(other), None, "{other}");
        }
    }

    #[test]
    fn slurm_alone_hands_on_each_release_by_itself() {
        // Seed 11 of the hold-out: on n1, two one-GPU jobs ended a second apart; Slurm gave
        // each GPU to the next one-GPU job, and the two-GPU job 9 waited for the next pair
        // (measured 109 s). In 1 s rounds both releases fell in one round and job 9 took
        // the pair (predicted 94 s).
        let record = records_in(include_str!(
            "../../../docs/data/prediction-record-holdout-seeds9-12.jsonl"
        ))
        .remove(2);
        assert_eq!(record.seed, 11);
        let run = |slurm_round_s: f64| {
            let t = Timing {
                slurm_round_s,
                ..Timing::default()
            };
            compare(&record, &t, false, &[Scheduler::Slurm])
                .unwrap()
                .remove(0)
        };
        let (now, whole_seconds) = (run(Timing::default().slurm_round_s), run(1.0));
        let m = now.measured_jct[9];
        assert!(
            (now.predicted_jct[9] - m).abs() / m < 0.05,
            "{}",
            now.predicted_jct[9]
        );
        assert!(
            whole_seconds.predicted_jct[9] < 0.9 * m,
            "{}",
            whole_seconds.predicted_jct[9]
        );
        assert!(now.errors.makespan_pct.abs() < 10.0, "{:?}", now.errors);
    }
}
