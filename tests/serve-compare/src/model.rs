//! The test cluster as the simulator models it, and a measured workload turned into the
//! simulator's input: the same jobs (Gavel's rates, the steps each ran, the moments they were
//! submitted) on the same nodes, played through the policy each scheduler runs.
//!
//! * **Slurm alone**: `hadar_core::policies::slurm_backfill` (FIFO with backfill,
//!   non-preemptive), each job held to the type it asked for, with the test cluster's
//!   settings ([`test_cluster_slurm`]): the jobs have no time limit, so backfill reserves
//!   nothing and every job that fits starts, and each job's GPUs are on one node. Slurm is
//!   event-driven (it schedules on each job's end, and its backfill runs every second,
//!   `bf_interval=1`), so the simulator plays it in 0.1 s rounds; its start latency
//!   (launch, the program's start-up and end) is longer than such a round, and a job that
//!   never moves pays it exactly once, so it is added to the job's run on its one type.
//! * **`hadar serve` with Hadar**: `hadar_core::passes::served` over Hadar, configured from the
//!   daemon's own config file, in the daemon's rounds, with its restart cost and the start
//!   latency measured on the cluster. Its rounds are woken by submissions (no sooner than
//!   the daemon's `MIN_WOKEN_GAP` after the last) and each sees only the jobs submitted
//!   before it read the queue, so a burst's first round plans a part of it
//!   (docs/prediction.md).
//! * **`hadar serve` with HadarE** (every job `fork=yes`): HadarE's `plan_round`, the code
//!   the daemon's fork pass calls, in the daemon's rounds, each round costing the copies'
//!   start-up; a job ends a little after its last round (`finish_s`: the daemon counts the
//!   round at its next round, releases the job, and its finish step runs).
//!
//! With a captured site (`--predict --site`, [`crate::site_scenario`]), Slurm alone's
//! backfill runs behind the site's gate and Hadar as `hadar simulate --site --config` serves
//! it: the site's limits, reservations and partitions, as the daemon's round applies them.

use crate::WorkJob;
use hadar_core::passes::served::ServedPolicy;
use hadar_core::policies::PolicyName;
use hadar_core::policies::slurm_backfill::{NodeLayout, SlurmBackfill, SlurmOptions, TimeLimits};
use hadar_core::policies::{hadar::HadarPolicy, hadare::HadarEPolicy};
use hadar_core::{Cluster, Job, JobId, Node, Policy, RateCurve, ThroughputProfile};
use hadar_daemon::site::simulated::{SimulatedSite, SiteGate};
use hadar_sim::{ClusterModel, SimConfig, Workload};

/// The three ways a workload is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduler {
    /// Slurm alone, each job asking for its fastest type.
    Slurm,
    /// `hadar serve`, `policy = "hadar"`.
    Hadar,
    /// `hadar serve`, `policy = "hadare"`, every job `fork=yes`.
    HadarE,
}

impl Scheduler {
    /// All three, in the order they run.
    pub const ALL: [Scheduler; 3] = [Scheduler::Slurm, Scheduler::Hadar, Scheduler::HadarE];

    /// The name used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheduler::Slurm => "slurm",
            Scheduler::Hadar => "hadar",
            Scheduler::HadarE => "hadare",
        }
    }
}

/// How the test cluster's Slurm schedules the comparison's jobs (docs/prediction.md): they
/// are submitted with no `--time` to a partition with `MaxTime=INFINITE` and no
/// `DefaultTime`, so none has a time limit; and each asks `--gres=gpu:TYPE:N` without a node
/// count, which Slurm places on one node.
pub fn test_cluster_slurm() -> SlurmOptions {
    SlurmOptions {
        time_limits: TimeLimits::Unlimited,
        nodes: NodeLayout::OneNode,
    }
}

/// The test cluster's timing, and its Slurm's settings (docs/prediction.md).
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Slurm alone: how the baseline schedules ([`test_cluster_slurm`] by default; other
    /// settings are diagnostics).
    pub slurm: SlurmOptions,
    /// Slurm alone: seconds from a job's GPUs being free (or its submission) to its end,
    /// beyond its training time: scheduling, launch, the program's start and exit.
    pub slurm_start_s: f64,
    /// Slurm alone: the simulator's round. Slurm schedules on each job's end, so releases a
    /// fraction of a second apart must not be taken together (a job needing two GPUs would
    /// take two that came free one after the other, where Slurm gave the first to a smaller
    /// job): a tenth of a second, finer than Slurm's whole-second times.
    pub slurm_round_s: f64,
    /// `hadar serve`'s round (`round_seconds`) with Hadar.
    pub hadar_round_s: f64,
    /// `restart_seconds` of the daemon with Hadar: checkpoint, requeue and reload.
    pub hadar_restart_s: f64,
    /// With Hadar, seconds a job loses each time it starts: the release, Slurm's start, the
    /// program's start-up.
    pub hadar_start_s: f64,
    /// With Hadar, seconds from a submission to the daemon's read of the queue in the round
    /// it starts (the plugin's notice, the read of Slurm), beyond the daemon's own
    /// `wake_settle_seconds` (taken from its config): a round sees only the jobs submitted
    /// before it. Rounds are woken by submissions, at most one per the daemon's
    /// `MIN_WOKEN_GAP` (2 s).
    pub hadar_read_s: f64,
    /// Seconds between two submissions of the burst, for records whose jobs share Slurm's
    /// whole-second `SubmitTime` and have no sub-second submission time of their own: such
    /// jobs arrive in submission order this far apart.
    pub submit_spacing_s: f64,
    /// `hadar serve`'s round with HadarE.
    pub hadare_round_s: f64,
    /// With HadarE, seconds of each round a forked job's copies do not train: the copy
    /// job's submission and start, the runner's and program's start-up, the deadline margin.
    pub hadare_copy_startup_s: f64,
    /// With HadarE, seconds from the daemon's round that counts a job's last copies (the
    /// end of their round) to the job's end in Slurm: its release and finish step.
    pub hadare_finish_s: f64,
}

impl Default for Timing {
    /// First estimates for the test cluster (docs/prediction.md); each run prints what it
    /// observed, and `--model` changes them.
    fn default() -> Self {
        Timing {
            slurm: test_cluster_slurm(),
            slurm_start_s: 1.0,
            slurm_round_s: 0.1,
            hadar_round_s: 3.0,
            hadar_restart_s: 3.0,
            hadar_start_s: 2.0,
            hadar_read_s: 0.02,
            submit_spacing_s: 0.009,
            hadare_round_s: 10.0,
            hadare_copy_startup_s: 4.2,
            hadare_finish_s: 1.0,
        }
    }
}

/// The cluster from its nodes' names and typed GPU counts (as `scontrol show node` gives
/// them); types in order of first appearance.
pub fn cluster_of(nodes: &[(String, Vec<(String, u32)>)]) -> Result<Cluster, String> {
    let mut types: Vec<String> = Vec::new();
    for (_, gpus) in nodes {
        for (t, _) in gpus {
            if !types.contains(t) {
                types.push(t.clone());
            }
        }
    }
    let nodes = nodes
        .iter()
        .map(|(name, gpus)| Node {
            name: name.clone(),
            gpus: types
                .iter()
                .map(|t| gpus.iter().filter(|(g, _)| g == t).map(|(_, c)| c).sum())
                .collect(),
        })
        .collect();
    Cluster::new(types, nodes).map_err(|e| format!("the test cluster: {e}"))
}

/// The simulator's jobs for a measured workload: job `i` is `work[i]`, arriving
/// `arrivals[i]` seconds after the first submission, with Gavel's unscaled rates and its
/// steps divided by the time scale (so it runs as many seconds as on the cluster). For
/// `Scheduler::Slurm` each job can run only on the type it asked for, and its start
/// latency is added to its run there.
pub fn sim_jobs(
    work: &[WorkJob],
    arrivals: &[f64],
    scale: f64,
    cluster: &Cluster,
    who: Scheduler,
    timing: &Timing,
) -> Result<Vec<Job>, String> {
    if work.len() != arrivals.len() {
        return Err(format!(
            "{} jobs but {} submission times",
            work.len(),
            arrivals.len()
        ));
    }
    let table = hadar_formats::embedded::throughputs().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (i, (j, at)) in work.iter().zip(arrivals).enumerate() {
        let name = table
            .resolve_job_type(&j.job_type)
            .ok_or_else(|| format!("job {i}: unknown job type {}", j.job_type))?
            .to_string();
        let mut profile = table
            .profile(&name, cluster)
            .ok_or_else(|| format!("job {i}: no rates for {name}"))?;
        let mut steps = j.steps as f64 / scale;
        if who == Scheduler::Slurm {
            let t = cluster
                .type_by_name(&j.fastest)
                .ok_or_else(|| format!("job {i}: the cluster has no {}", j.fastest))?;
            let rate = profile
                .rate(t, j.workers)
                .ok_or_else(|| format!("job {i}: {name} has no rate on {}", j.fastest))?;
            profile = ThroughputProfile::new(
                cluster
                    .types()
                    .map(|u| {
                        if u == t {
                            profile.curve(u).clone()
                        } else {
                            RateCurve::default()
                        }
                    })
                    .collect(),
            );
            steps += timing.slurm_start_s * rate;
        }
        out.push(Job {
            restart_s: None,
            id: JobId(i as u64),
            kind: name,
            arrival_s: *at,
            workers: j.workers,
            total_steps: steps,
            weight: 1.0,
            throughput: profile,
        });
    }
    Ok(out)
}

/// The simulator's settings and policy for one scheduler; `config` is the daemon's config
/// file text (its `[hadar]`, `[hadare]` and look-ahead settings are the policies'), `site` the
/// captured site the run obeyed.
pub fn sim_setup(
    who: Scheduler,
    timing: &Timing,
    config: &str,
    site: Option<SimulatedSite>,
) -> Result<(SimConfig, Box<dyn Policy>), String> {
    let c =
        hadar_daemon::DaemonConfig::parse("daemon config", config).map_err(|e| e.to_string())?;
    let policy = match site {
        Some(site) => policy_within_site(who, timing, &c, site)?,
        None => policy(who, timing, &c),
    };
    Ok((sim_config(who, timing, config, &c), policy))
}

/// The simulator's settings for `who`'s runs: its rounds, restart and timing.
fn sim_config(
    who: Scheduler,
    timing: &Timing,
    config: &str,
    c: &hadar_daemon::DaemonConfig,
) -> SimConfig {
    // The daemon's loop, for Hadar and HadarE alike: woken by submissions.
    let woken = |model: ClusterModel| ClusterModel {
        wake_read_s: wake_settle(config) + timing.hadar_read_s,
        wake_gap_s: hadar_daemon::daemon::MIN_WOKEN_GAP.as_secs_f64(),
        fixed_rounds: true,
        ..model
    };
    match who {
        Scheduler::Slurm => SimConfig {
            round_s: timing.slurm_round_s,
            ..SimConfig::default()
        },
        Scheduler::Hadar => SimConfig {
            round_s: timing.hadar_round_s,
            restart_s: timing.hadar_restart_s,
            model: woken(ClusterModel {
                start_latency_s: timing.hadar_start_s,
                ..ClusterModel::default()
            }),
            ..SimConfig::default()
        },
        Scheduler::HadarE => SimConfig {
            round_s: timing.hadare_round_s,
            restart_s: c.sidecar.restart_seconds,
            model: woken(ClusterModel {
                copy_startup_s: timing.hadare_copy_startup_s,
                ..ClusterModel::default()
            }),
            ..SimConfig::default()
        },
    }
}

/// The policy `who` runs, configured by the daemon's config `c`.
fn policy(who: Scheduler, timing: &Timing, c: &hadar_daemon::DaemonConfig) -> Box<dyn Policy> {
    match who {
        Scheduler::Slurm => Box::new(SlurmBackfill::with_options(timing.slurm)),
        Scheduler::Hadar => Box::new(ServedPolicy::new(
            c.served(),
            Box::new(HadarPolicy::new(c.hadar.clone())),
        )),
        Scheduler::HadarE => Box::new(HadarEPolicy::new(c.hadare.clone())),
    }
}

/// The policy `who` runs within a captured site (`--predict --site`): Slurm alone's
/// backfill behind the site's gate, Hadar as `hadar simulate --site --config` serves it.
fn policy_within_site(
    who: Scheduler,
    timing: &Timing,
    c: &hadar_daemon::DaemonConfig,
    site: SimulatedSite,
) -> Result<Box<dyn Policy>, String> {
    Ok(match who {
        Scheduler::Slurm => {
            let backfill = Box::new(SlurmBackfill::with_options(timing.slurm));
            Box::new(
                SiteGate::new(site, Default::default(), |stage| stage.around(backfill))
                    .as_slurm_alone(),
            )
        }
        Scheduler::Hadar => {
            hadar_daemon::site::simulated::within(PolicyName::Served, &c.policy_options(0), site)
                .ok_or("the served policy cannot be built")?
        }
        Scheduler::HadarE => {
            return Err("the site scenario is run by Slurm alone and Hadar, not HadarE".into());
        }
    })
}

/// The daemon's `wake_settle_seconds` in its config file text. A record's config that does
/// not name the key comes from a daemon that had none (it read the queue on the notice).
pub fn wake_settle(config: &str) -> f64 {
    match hadar_daemon::DaemonConfig::parse("daemon config", config) {
        Ok(c) if config.contains("wake_settle_seconds") => c.sidecar.wake_settle_seconds,
        _ => 0.0,
    }
}

/// A prediction: each job's completion time (in `work` order) and the makespan, seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Predicted {
    pub jct_s: Vec<f64>,
    pub makespan_s: f64,
    /// Jobs that ran in the simulator's first round (of a burst: those the daemon's first
    /// read of the queue saw).
    pub first_round_jobs: usize,
}

/// Who ran a measured run, and under what: its daemon's config file text (empty for Slurm
/// alone) and the site whose rules it obeyed, if any.
pub struct RunBy<'a> {
    pub who: Scheduler,
    pub config: &'a str,
    pub site: Option<SimulatedSite>,
}

/// Plays the measured workload through the simulator as `run.who` runs it.
pub fn predict(
    work: &[WorkJob],
    arrivals: &[f64],
    scale: f64,
    cluster: &Cluster,
    timing: &Timing,
    run: RunBy<'_>,
) -> Result<Predicted, String> {
    let RunBy { who, config, site } = run;
    let jobs = sim_jobs(work, arrivals, scale, cluster, who, timing)?;
    let (cfg, mut policy) = sim_setup(who, timing, config, site)?;
    let w = Workload {
        cluster: cluster.clone(),
        jobs,
    };
    let mut first_round_jobs = 0;
    let report = hadar_sim::simulate_observed(&w, policy.as_mut(), &cfg, &mut |r| {
        if r.index == 0 {
            first_round_jobs = r.runs.len();
        }
    })
    .map_err(|e| format!("simulating {}: {e}", who.as_str()))?;
    let extra = if who == Scheduler::HadarE {
        timing.hadare_finish_s
    } else {
        0.0
    };
    let mut jct = vec![f64::NAN; work.len()];
    let mut last = f64::NEG_INFINITY;
    for o in &report.jobs {
        jct[o.id.0 as usize] = o.jct_s() + extra;
        last = last.max(o.finish_s + extra);
    }
    let first = arrivals.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(Predicted {
        jct_s: jct,
        makespan_s: last - first,
        first_round_jobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_settle_time_is_its_daemons_or_none_before_the_key() {
        let base = "[sidecar]\nround_seconds = 3\n";
        assert_eq!(wake_settle(base), 0.0);
        assert_eq!(
            wake_settle(&format!("{base}wake_settle_seconds = 0.5\n")),
            0.5
        );
        assert_eq!(
            wake_settle(&format!("{base}wake_settle_seconds = 0\n")),
            0.0
        );
    }

    fn test_cluster() -> Cluster {
        let n = |name: &str, g: &[(&str, u32)]| {
            (
                name.to_string(),
                g.iter().map(|(t, c)| (t.to_string(), *c)).collect(),
            )
        };
        cluster_of(&[
            n("n1", &[("v100", 4)]),
            n("n2", &[("p100", 4)]),
            n("n3", &[("k80", 4)]),
            n("n4", &[("v100", 2), ("k80", 2)]),
        ])
        .unwrap()
    }

    const CONFIG: &str = "[slurm]\nmanaged_partitions = [\"gpu\"]\ndefault_partition = \"gpu\"\n\n[sidecar]\nround_seconds = 3\nrestart_seconds = 3\nthroughput_scale = 10\n";

    #[test]
    fn the_cluster_keeps_nodes_and_types() {
        let c = test_cluster();
        assert_eq!(c.type_names(), ["v100", "p100", "k80"]);
        assert_eq!(c.nodes().len(), 4);
        assert_eq!(c.total_gpus(), 16);
        let v100 = c.type_by_name("v100").unwrap();
        assert_eq!(c.total_of_type(v100), 6);
        assert_eq!(c.nodes()[3].gpus, vec![2, 0, 2]);
        assert!(cluster_of(&[]).is_err());
    }

    #[test]
    fn measured_jobs_become_sim_jobs_that_run_as_long_as_on_the_cluster() {
        let c = test_cluster();
        let work = crate::workload(6, 3, 10.0);
        let at: Vec<f64> = (0..6).map(|i| i as f64 * 0.5).collect();
        let t = Timing::default();
        let jobs = sim_jobs(&work, &at, 10.0, &c, Scheduler::Hadar, &t).unwrap();
        let table = hadar_formats::embedded::throughputs().unwrap();
        for (i, (j, w)) in jobs.iter().zip(&work).enumerate() {
            assert_eq!(j.id, JobId(i as u64));
            assert_eq!(j.arrival_s, at[i]);
            assert_eq!(j.workers, w.workers);
            // At its fastest type it runs as long as `hadar emulate` does at time scale 10.
            let fast = c.type_by_name(&w.fastest).unwrap();
            let real_s =
                w.steps as f64 / (table.rate(&j.kind, &w.fastest, w.workers).unwrap() * 10.0);
            let sim_s = j.total_steps / j.throughput.rate(fast, j.workers).unwrap();
            assert!((real_s - sim_s).abs() < 1e-9, "{real_s} vs {sim_s}");
        }
        // Slurm's jobs run only on the type asked for, their start latency included.
        let slurm = sim_jobs(&work, &at, 10.0, &c, Scheduler::Slurm, &t).unwrap();
        for (j, w) in slurm.iter().zip(&work) {
            let fast = c.type_by_name(&w.fastest).unwrap();
            for ty in c.types().filter(|u| *u != fast) {
                assert!(j.throughput.rate(ty, j.workers).is_none());
            }
            let plain = jobs.iter().find(|p| p.id == j.id).unwrap();
            let extra = (j.total_steps - plain.total_steps) / j.rate_on(fast).unwrap();
            assert!((extra - t.slurm_start_s).abs() < 1e-9);
        }
        assert!(sim_jobs(&work, &at[..2], 10.0, &c, Scheduler::Slurm, &t).is_err());
    }

    fn by(who: Scheduler) -> RunBy<'static> {
        RunBy {
            who,
            config: CONFIG,
            site: None,
        }
    }

    #[test]
    fn one_job_alone_is_predicted_at_its_run_plus_overheads() {
        let c = test_cluster();
        let work = crate::workload(1, 1, 10.0);
        let table = hadar_formats::embedded::throughputs().unwrap();
        let name = table
            .resolve_job_type(&work[0].job_type)
            .unwrap()
            .to_string();
        let rate = table
            .rate(&name, &work[0].fastest, work[0].workers)
            .unwrap();
        let alone = work[0].steps as f64 / (rate * 10.0);
        let t = Timing::default();
        let p = predict(&work, &[0.0], 10.0, &c, &t, by(Scheduler::Slurm)).unwrap();
        assert!(
            (p.jct_s[0] - (alone + t.slurm_start_s)).abs() < 0.1,
            "{p:?}"
        );
        assert_eq!(p.makespan_s, p.jct_s[0]);
        let h = predict(&work, &[0.0], 10.0, &c, &t, by(Scheduler::Hadar)).unwrap();
        assert!(
            (h.jct_s[0] - (alone + t.hadar_start_s)).abs() < 0.1,
            "{h:?}"
        );
        let e = predict(&work, &[0.0], 10.0, &c, &t, by(Scheduler::HadarE)).unwrap();
        // Forked over several GPUs it ends sooner than alone on one, but pays every round.
        assert!(e.jct_s[0] > t.hadare_copy_startup_s + t.hadare_finish_s);
        assert!(e.jct_s[0].is_finite());
    }
}
