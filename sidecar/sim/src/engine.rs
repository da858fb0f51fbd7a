//! The round loop: plan, check, run, account.

use crate::metrics::{JobOutcome, Metrics, SimReport, TypeUtilisation, mean, percentile};
use hadar_core::passes::mixed::left_over;
use hadar_core::{
    Assignment, Cluster, Job, JobId, JobState, Placement, PlacementKind, PlanViolation, Policy,
    RoundInput, RoundPlan,
};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

/// Simulation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Round length in seconds (Gavel: 360).
    pub round_s: f64,
    /// Seconds lost when a job's placement changes or it resumes (default 0, as in Gavel).
    pub restart_s: f64,
    /// The seed the policies were built with, recorded for reproducibility.
    pub seed: u64,
    /// Safety limit on rounds; exceeding it is an error rather than a hang.
    pub max_rounds: u64,
    /// Rounds in a row in which no job may advance before the run stops with
    /// [`SimError::NoProgress`]: a policy that moves every job it runs each round, with a
    /// restart as long as the round, would otherwise play until `max_rounds`.
    pub max_rounds_without_progress: u64,
    /// The real cluster's constraints (none by default).
    pub model: crate::ClusterModel,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_s: 360.0,
            restart_s: 0.0,
            seed: 0,
            max_rounds: 10_000_000,
            max_rounds_without_progress: 1_000,
            model: crate::ClusterModel::default(),
        }
    }
}

/// A cluster and the jobs to play on it.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The cluster.
    pub cluster: Cluster,
    /// The jobs, in any order (they are played by arrival time, then id).
    pub jobs: Vec<Job>,
}

/// Why a simulation could not finish.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SimError {
    /// The settings make no sense.
    #[error("invalid simulation settings: {0}")]
    InvalidConfig(String),
    /// The workload has no jobs.
    #[error("the workload has no jobs")]
    NoJobs,
    /// Two jobs share an id.
    #[error("job id {0} appears twice in the workload")]
    DuplicateJob(JobId),
    /// A job cannot run on any GPU type of the cluster.
    #[error(
        "job {0} has no positive throughput on any GPU type of the cluster: it could never run"
    )]
    CannotRun(JobId),
    /// The policy returned a plan that breaks capacity or gang rules.
    #[error("policy `{policy}` broke a rule in round {round}: {violation}")]
    PolicyViolation {
        /// The policy.
        policy: String,
        /// The round.
        round: u64,
        /// The rule.
        violation: PlanViolation,
    },
    /// Jobs remain but the policy will not run any, and no more jobs will arrive.
    #[error(
        "policy `{policy}` left {waiting} jobs waiting at t={at_s:.0}s with no job running and none to arrive (first: job {first} — {reason})"
    )]
    Stuck {
        /// The policy.
        policy: String,
        /// When.
        at_s: f64,
        /// How many jobs were left.
        waiting: usize,
        /// The first of them.
        first: JobId,
        /// The reason the policy gave for it.
        reason: String,
    },
    /// Jobs ran, but none advanced, for too many rounds in a row.
    #[error(
        "policy `{policy}` made no progress for {rounds} rounds in a row (until t={at_s:.0}s, {active} jobs left): every job it ran lost its whole {round_s} s round to restarting ({restart_s} s) or starting ({start_s} s), so a job it moves every round never advances; a restart and start-up shorter than the round let it"
    )]
    NoProgress {
        /// The policy.
        policy: String,
        /// The rounds in a row without progress.
        rounds: u64,
        /// When the run stopped.
        at_s: f64,
        /// Jobs not finished.
        active: usize,
        /// The restart cost.
        restart_s: f64,
        /// The round length.
        round_s: f64,
        /// The cluster model's start latency.
        start_s: f64,
    },
    /// The round limit was reached.
    #[error("policy `{policy}` did not finish within {rounds} rounds")]
    TooManyRounds {
        /// The policy.
        policy: String,
        /// The limit.
        rounds: u64,
    },
}

/// What happened in one round, for observers (the Job Tracker, debugging output).
#[derive(Clone, Debug)]
pub struct RoundRecord {
    /// 0-based round index.
    pub index: u64,
    /// Round start.
    pub start_s: f64,
    /// Round end (its last job's stop).
    pub end_s: f64,
    /// Per running job: its placement, the steps it did, and whether it restarted.
    pub runs: Vec<RoundRun>,
}

/// One job's run within a round.
#[derive(Clone, Debug)]
pub struct RoundRun {
    /// The job.
    pub job: JobId,
    /// Where it ran.
    pub placement: Placement,
    /// Steps done this round.
    pub steps: f64,
    /// For a forked placement, the steps each copy did (in the order of its parts); they
    /// sum to `steps`. Empty for gang placements.
    pub copy_steps: Vec<f64>,
    /// Steps the job has left after this round.
    pub remaining_steps: f64,
    /// Seconds it ran (including any restart).
    pub seconds: f64,
    /// True when it paid a restart this round.
    pub restarted: bool,
}

/// Plays the workload through `policy`.
pub fn simulate(
    w: &Workload,
    policy: &mut dyn Policy,
    cfg: &SimConfig,
) -> Result<SimReport, SimError> {
    simulate_observed(w, policy, cfg, &mut |_| {})
}

/// Like [`simulate`], calling `observe` after every round.
pub fn simulate_observed(
    w: &Workload,
    policy: &mut dyn Policy,
    cfg: &SimConfig,
    observe: &mut dyn FnMut(&RoundRecord),
) -> Result<SimReport, SimError> {
    simulate_with(w, policy, cfg, None, observe)
}

/// The general form: policies plan with `beliefs` (their throughputs, refined from
/// measurements) when given, else with the true throughputs; `observe` sees every round.
pub fn simulate_with(
    w: &Workload,
    policy: &mut dyn Policy,
    cfg: &SimConfig,
    mut beliefs: Option<&mut dyn crate::Beliefs>,
    observe: &mut dyn FnMut(&RoundRecord),
) -> Result<SimReport, SimError> {
    check_config(cfg)?;
    let order = arrival_order(w)?;
    let cluster = &w.cluster;
    let types = cluster.type_count();
    let name = policy.name().to_string();
    let first_arrival = order[0].arrival_s;
    // A round started by an arrival reads the queue `wake_read_s` after it.
    let read_s = cfg.model.wake_read_s;
    let mut now = first_arrival + read_s;
    let mut next = 0usize; // next job in `order` to arrive
    let mut active: Vec<Tracked> = Vec::new();
    let mut outcomes: Vec<JobOutcome> = Vec::with_capacity(order.len());
    let mut tally = Tally {
        busy_by_type: vec![0.0f64; types],
        ..Tally::default()
    };
    let mut stalled_rounds = 0u64;

    loop {
        next = admit_arrivals(&order, next, now, &mut active, types, &mut beliefs);
        if active.is_empty() {
            if next < order.len() {
                now = order[next].arrival_s + read_s;
                continue;
            }
            break;
        }
        if tally.rounds >= cfg.max_rounds {
            return Err(SimError::TooManyRounds {
                policy: name,
                rounds: tally.rounds,
            });
        }

        let flying = in_flight(&active, now);
        let plan = plan_round(policy, cfg, cluster, &active, &flying, now, &mut tally).map_err(
            |violation| SimError::PolicyViolation {
                policy: name.clone(),
                round: tally.rounds,
                violation,
            },
        )?;

        let next_arrival = order.get(next).map(|j| j.arrival_s);
        if plan.assignments.is_empty() && flying.is_empty() {
            match wait_for_arrival(&mut active, next_arrival, read_s, now) {
                Some(until) => {
                    now = until;
                    tally.rounds += 1;
                    continue;
                }
                None => return Err(stuck(name, now, &active, &plan)),
            }
        }

        let round_len = cfg.model.round_length(cfg.round_s, now, next_arrival);
        let record = play_round(
            &mut active,
            &plan,
            cfg,
            now,
            round_len,
            &mut tally,
            beliefs.as_deref_mut(),
        );
        let end = record.end_s;
        observe(&record);
        tally.rounds += 1;
        check_progress(&record, &mut stalled_rounds, cfg, &name, active.len())?;
        active = retire_finished(active, end, cfg, &mut outcomes);
        now = end;
    }
    Ok(report(
        name,
        cluster,
        outcomes,
        first_arrival,
        tally,
        order.len(),
    ))
}

/// Adds the jobs of `order` from `next` on that have arrived by `now` to `active`, each
/// planned with the throughputs `beliefs` give it when there are beliefs. Returns the index
/// of the next job still to arrive.
fn admit_arrivals(
    order: &[Arc<Job>],
    mut next: usize,
    now: f64,
    active: &mut Vec<Tracked>,
    types: usize,
    beliefs: &mut Option<&mut dyn crate::Beliefs>,
) -> usize {
    while next < order.len() && order[next].arrival_s <= now {
        let truth = order[next].clone();
        let mut t = Tracked::new(truth.clone(), types);
        if let Some(b) = beliefs.as_deref_mut() {
            t.state.job = Arc::new(Job {
                throughput: b.on_arrival(&truth),
                ..(*truth).clone()
            });
        }
        active.push(t);
        next += 1;
    }
    next
}

/// A round in which nothing runs: every job loses its placement and waits until the next
/// arrival is read (`next_arrival`, `None` when no job is left to arrive). Returns that
/// time, or `None` when there is nothing to wait for.
fn wait_for_arrival(
    active: &mut [Tracked],
    next_arrival: Option<f64>,
    read_s: f64,
    now: f64,
) -> Option<f64> {
    for t in active.iter_mut() {
        t.state.placement = None;
    }
    let until = (next_arrival? + read_s).max(now);
    add_contention(active, until - now);
    Some(until)
}

/// Counts the rounds in a row in which no job advanced (`stalled_rounds`, this round's
/// `record` included), and stops the run once there are too many: a policy that never lets
/// a job advance would otherwise play until `max_rounds`.
fn check_progress(
    record: &RoundRecord,
    stalled_rounds: &mut u64,
    cfg: &SimConfig,
    policy: &str,
    active: usize,
) -> Result<(), SimError> {
    if record.runs.iter().any(|r| r.steps > 0.0) {
        *stalled_rounds = 0;
    } else {
        *stalled_rounds += 1;
        if *stalled_rounds >= cfg.max_rounds_without_progress {
            return Err(SimError::NoProgress {
                policy: policy.to_string(),
                rounds: *stalled_rounds,
                at_s: record.end_s,
                active,
                restart_s: cfg.restart_s,
                round_s: cfg.round_s,
                start_s: cfg.model.start_latency_s,
            });
        }
    }
    Ok(())
}

/// Moves the jobs done by `end` (no steps left, no copies in flight) from `active` to
/// `outcomes`; returns the jobs still active.
fn retire_finished(
    active: Vec<Tracked>,
    end: f64,
    cfg: &SimConfig,
    outcomes: &mut Vec<JobOutcome>,
) -> Vec<Tracked> {
    let mut still = Vec::with_capacity(active.len());
    for mut t in active {
        if t.state.remaining_steps <= 0.0 && !t.in_flight(end) {
            // On the daemon's clock a forked job ends when the next round counts its
            // copies' steps: at the end of this one.
            if cfg.model.fixed_rounds && t.forked() {
                t.stop_s = end;
            }
            outcomes.push(t.finish());
        } else {
            still.push(t);
        }
    }
    still
}

/// The round's plan, checked: the active jobs whose copies are not in flight, as the model
/// shows them, planned over the GPUs the `flying` ones' copies leave (as the daemon plans
/// around open rounds); none when those copies hold every GPU.
fn plan_round(
    policy: &mut dyn Policy,
    cfg: &SimConfig,
    cluster: &Cluster,
    active: &[Tracked],
    flying: &[JobState],
    now: f64,
    tally: &mut Tally,
) -> Result<RoundPlan, PlanViolation> {
    let free = match flying.is_empty() {
        true => Cow::Borrowed(cluster),
        false => match left_over(cluster, flying, &RoundPlan::default()) {
            Some(c) => Cow::Owned(c),
            None => return Ok(RoundPlan::default()),
        },
    };
    let (states, facts) = cfg.model.round_view(
        &free,
        active
            .iter()
            .filter(|t| !t.in_flight(now))
            .map(|t| (&t.state, t.held.as_deref())),
    );
    let input = RoundInput {
        now_s: now,
        round_s: cfg.round_s,
        restart_s: cfg.restart_s,
        cluster: &free,
        jobs: &states,
    };
    let started = Instant::now();
    let plan = policy.plan_on(&input, &facts);
    tally
        .decision_ms
        .push(started.elapsed().as_secs_f64() * 1e3);
    plan.validate(&free, &states)?;
    Ok(plan)
}

/// What a run adds up as it goes: busy GPU-seconds per type, restarts, each round's
/// decision time, and the rounds played.
#[derive(Default)]
struct Tally {
    busy_by_type: Vec<f64>,
    restarts: u64,
    decision_ms: Vec<f64>,
    rounds: u64,
}

/// The round length, the restart cost and the cluster model must make sense together.
fn check_config(cfg: &SimConfig) -> Result<(), SimError> {
    if !(cfg.round_s.is_finite() && cfg.round_s > 0.0) {
        return Err(SimError::InvalidConfig(format!(
            "round length must be positive, got {}",
            cfg.round_s
        )));
    }
    if !(cfg.restart_s.is_finite() && cfg.restart_s >= 0.0 && cfg.restart_s <= cfg.round_s) {
        return Err(SimError::InvalidConfig(format!(
            "restart cost must be at least 0 and at most a round ({} s), got {}",
            cfg.round_s, cfg.restart_s
        )));
    }
    cfg.model
        .validate(cfg.round_s, cfg.restart_s)
        .map_err(SimError::InvalidConfig)
}

/// The workload's jobs in arrival order: at least one, ids unique, each able to run on
/// some type of the cluster.
fn arrival_order(w: &Workload) -> Result<Vec<Arc<Job>>, SimError> {
    if w.jobs.is_empty() {
        return Err(SimError::NoJobs);
    }
    let mut order: Vec<Arc<Job>> = w.jobs.iter().cloned().map(Arc::new).collect();
    order.sort_by(|a, b| a.arrival_order(b));
    for pair in order.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(SimError::DuplicateJob(pair[0].id));
        }
    }
    let mut ids: Vec<JobId> = order.iter().map(|j| j.id).collect();
    ids.sort();
    if let Some(d) = ids.windows(2).find(|p| p[0] == p[1]) {
        return Err(SimError::DuplicateJob(d[0]));
    }
    for j in &order {
        if !j.can_run_somewhere(w.cluster.types()) {
            return Err(SimError::CannotRun(j.id));
        }
        if let Some(r) = j.restart_s.filter(|r| !(r.is_finite() && *r >= 0.0)) {
            return Err(SimError::InvalidConfig(format!(
                "job {}'s restart cost must be at least 0 seconds, got {r}",
                j.id
            )));
        }
    }
    Ok(order)
}

/// The error for a round that placed nothing with no arrival left to wait for, naming the
/// first active job and the policy's reason for it.
fn stuck(policy: String, now: f64, active: &[Tracked], plan: &RoundPlan) -> SimError {
    let first = active[0].state.id();
    let reason = plan
        .waiting
        .iter()
        .find(|w| w.job == first)
        .map(|w| w.reason.to_string())
        .unwrap_or_else(|| "no reason given".to_string());
    SimError::Stuck {
        policy,
        at_s: now,
        waiting: active.len(),
        first,
        reason,
    }
}

/// Runs `plan` for a round of `round_len` from `now`: each assignment's progress, the jobs
/// not placed lose their placement, waiting time is counted, and `beliefs` learn from the
/// measured rates. Returns the round's record.
fn play_round(
    active: &mut [Tracked],
    plan: &RoundPlan,
    cfg: &SimConfig,
    now: f64,
    round_len: f64,
    tally: &mut Tally,
    beliefs: Option<&mut (dyn crate::Beliefs + '_)>,
) -> RoundRecord {
    let mut index_of = std::collections::HashMap::with_capacity(active.len());
    for (i, t) in active.iter().enumerate() {
        index_of.insert(t.state.id(), i);
    }
    let mut end = now;
    let mut runs = Vec::with_capacity(plan.assignments.len());
    let mut ran = vec![false; active.len()];
    for a in &plan.assignments {
        let i = index_of[&a.job];
        ran[i] = true;
        // On the daemon's clock a forked job's copies run a whole round from their start,
        // whenever the next round comes.
        let forked = a.placement.kind() == PlacementKind::Forked;
        let len = match cfg.model.fixed_rounds && forked {
            true => cfg.round_s.max(round_len),
            false => round_len,
        };
        let run = run_assignment(&mut active[i], a, cfg, now, len, &mut tally.busy_by_type);
        if len > round_len {
            // Until they stop: at the end of their round, or sooner with the job's last step.
            active[i].copies_until = now + run.seconds;
        }
        if run.restarted {
            tally.restarts += 1;
        }
        end = end.max(now + run.seconds);
        runs.push(run);
    }
    for (t, ran) in active.iter_mut().zip(&ran) {
        if !ran && !t.in_flight(now) {
            t.state.placement = None;
        }
    }
    if cfg.model.fixed_rounds {
        end = now + round_len;
    }
    add_contention(active, end - now);
    if let Some(b) = beliefs {
        learn(b, active, &index_of, &runs);
    }
    RoundRecord {
        index: tally.rounds,
        start_s: now,
        end_s: end,
        runs,
    }
}

/// The run's metrics from the finished jobs and the tally.
fn report(
    policy: String,
    cluster: &Cluster,
    mut outcomes: Vec<JobOutcome>,
    first_arrival: f64,
    tally: Tally,
    jobs: usize,
) -> SimReport {
    outcomes.sort_by_key(|o| o.id);
    let ttd = outcomes
        .iter()
        .map(|o| o.finish_s)
        .fold(first_arrival, f64::max)
        - first_arrival;
    let mut jcts: Vec<f64> = outcomes.iter().map(JobOutcome::jct_s).collect();
    jcts.sort_by(f64::total_cmp);
    let total_gpus = cluster.total_gpus() as f64;
    let busy: f64 = tally.busy_by_type.iter().sum();
    let ratio = |busy: f64, gpus: f64| {
        if ttd > 0.0 && gpus > 0.0 {
            busy / (gpus * ttd)
        } else {
            0.0
        }
    };
    let ftf: Vec<f64> = outcomes
        .iter()
        .map(JobOutcome::finish_time_fairness)
        .collect();
    let metrics = Metrics {
        ttd_s: ttd,
        avg_jct_s: mean(jcts.iter().copied()),
        p50_jct_s: percentile(&jcts, 0.5),
        p95_jct_s: percentile(&jcts, 0.95),
        cru: ratio(busy, total_gpus),
        utilisation_by_type: cluster
            .types()
            .map(|t| TypeUtilisation {
                gpu_type: cluster.type_name(t).to_string(),
                utilisation: ratio(
                    tally.busy_by_type[t.index()],
                    cluster.total_of_type(t) as f64,
                ),
            })
            .collect(),
        avg_queueing_s: mean(outcomes.iter().map(JobOutcome::queueing_s)),
        restarts: tally.restarts,
        ftf_mean: mean(ftf.iter().copied()),
        ftf_max: ftf.iter().copied().fold(0.0, f64::max),
        decision_ms_mean: mean(tally.decision_ms.iter().copied()),
        decision_ms_max: tally.decision_ms.iter().copied().fold(0.0, f64::max),
        rounds: tally.rounds,
        jobs,
        jobs_completed: outcomes.len(),
    };
    SimReport {
        policy,
        metrics,
        jobs: outcomes,
    }
}

/// Feeds the round's measured rates to the beliefs and refreshes the profiles policies see.
/// A single-type gang measures `X[type][workers]`; each forked copy measures
/// `X[type][gpus]`; a mixed gang runs at its slowest type's pace, which cannot be told apart
/// from the others', so it teaches nothing.
fn learn(
    beliefs: &mut dyn crate::Beliefs,
    active: &mut [Tracked],
    index_of: &std::collections::HashMap<JobId, usize>,
    runs: &[RoundRun],
) {
    for run in runs {
        let t = &mut active[index_of[&run.job]];
        let truth = t.truth.clone();
        let types = run.placement.types();
        let measurements: Vec<(hadar_core::GpuType, u32)> = match run.placement.kind() {
            PlacementKind::Forked => run
                .placement
                .parts()
                .iter()
                .map(|p| (p.gpu_type, p.gpus))
                .collect(),
            PlacementKind::Gang if types.len() == 1 => vec![(types[0], truth.workers)],
            PlacementKind::Gang => Vec::new(),
        };
        let mut profile = None;
        for (ty, g) in measurements {
            profile =
                Some(beliefs.on_measurement(truth.id, ty, g, truth.throughput.rate_or_zero(ty, g)));
        }
        if let Some(p) = profile {
            t.state.job = Arc::new(Job {
                throughput: p,
                ..(*t.state.job).clone()
            });
        }
    }
}
/// Runs job `t` for one round of `round_len` seconds (the configured round, or less when an
/// arrival wakes the next one) on assignment `a` starting at `now`: its start, restart and
/// carried-over overheads, its progress at the placement's rate, the productive GPU-seconds
/// per type (added to `busy_by_type`), and the round's record of it.
fn run_assignment(
    t: &mut Tracked,
    a: &Assignment,
    cfg: &SimConfig,
    now: f64,
    round_len: f64,
    busy_by_type: &mut [f64],
) -> RoundRun {
    let job = t.truth.clone();
    let summed = a.placement.rate(&job.throughput, job.workers);
    let rate = cfg.model.progress(&a.placement, summed);
    let restarted = t.state.rounds_run > 0 && t.state.placement.as_ref() != Some(&a.placement);
    let starts = t.state.placement.as_ref() != Some(&a.placement);
    let pays_restart =
        restarted || (starts && t.state.rounds_run == 0 && cfg.model.first_start_restarts);
    let forked = a.placement.kind() == PlacementKind::Forked;
    // Overheads longer than a round carry into the job's next rounds while it keeps
    // its placement (a 3 s restart plus a 2 s start in 3 s rounds, as the daemon has
    // on the test cluster); a new placement starts a new debt.
    let owed = cfg.model.overhead_s(
        job.restart_or(cfg.restart_s),
        pays_restart,
        starts,
        forked,
        f64::INFINITY,
    ) + if starts { 0.0 } else { t.owed_s };
    let overhead = owed.min(round_len);
    t.owed_s = owed - overhead;
    // A forked job's copies are new Slurm jobs every round: nothing holds it to types.
    if !forked {
        t.held.get_or_insert_with(|| a.placement.types());
    }
    let need_s = t.state.remaining_steps / rate;
    let (seconds, steps) = if rate > 0.0 && overhead + need_s <= round_len {
        (overhead + need_s, t.state.remaining_steps)
    } else {
        (round_len, rate * (round_len - overhead))
    };
    let productive = seconds - overhead;
    for p in a.placement.parts() {
        busy_by_type[p.gpu_type.index()] += p.gpus as f64 * productive;
    }
    let s = &mut t.state;
    s.remaining_steps = if steps >= s.remaining_steps {
        0.0
    } else {
        s.remaining_steps - steps
    };
    s.run_s += seconds;
    for ty in a.placement.types() {
        s.run_s_by_type[ty.index()] += seconds;
    }
    s.attained_gpu_s += a.placement.gpus() as f64 * seconds;
    s.rounds_run += 1;
    s.first_start_s.get_or_insert(now);
    s.placement = Some(a.placement.clone());
    if restarted {
        t.restarts += 1;
    }
    t.stop_s = now + seconds;
    let copy_steps = match a.placement.kind() {
        PlacementKind::Forked => a
            .placement
            .parts()
            .iter()
            .map(|p| {
                if summed > 0.0 {
                    steps * job.throughput.rate_or_zero(p.gpu_type, p.gpus) / summed
                } else {
                    0.0
                }
            })
            .collect(),
        PlacementKind::Gang => Vec::new(),
    };
    RoundRun {
        job: a.job,
        placement: a.placement.clone(),
        steps,
        copy_steps,
        remaining_steps: s.remaining_steps,
        seconds,
        restarted,
    }
}

/// A job in the system, with the simulator's own bookkeeping beside the policy's view.
struct Tracked {
    /// The job as it really is (its true throughput).
    truth: Arc<Job>,
    /// What the policy sees (its throughput may be an estimate).
    state: JobState,
    restarts: u32,
    /// The GPU types of its first placement (kept when the model says so).
    held: Option<Vec<hadar_core::GpuType>>,
    /// Overhead seconds still to pay from a previous round, on the same placement.
    owed_s: f64,
    /// When its forked copies stop, if they run past the round they started in.
    copies_until: f64,
    stop_s: f64,
    /// Integral of the number of active jobs over the job's time in the system.
    contention_s: f64,
    in_system_s: f64,
}

impl Tracked {
    fn new(job: Arc<Job>, types: usize) -> Self {
        Tracked {
            state: JobState::arrived(job.clone(), types),
            truth: job,
            restarts: 0,
            held: None,
            owed_s: 0.0,
            copies_until: f64::NEG_INFINITY,
            stop_s: 0.0,
            contention_s: 0.0,
            in_system_s: 0.0,
        }
    }

    /// Its copies still run at `t`.
    fn in_flight(&self, t: f64) -> bool {
        self.copies_until > t + 1e-9
    }

    /// It last ran forked.
    fn forked(&self) -> bool {
        self.state
            .placement
            .as_ref()
            .is_some_and(|p| p.kind() == PlacementKind::Forked)
    }

    fn finish(self) -> JobOutcome {
        let job = &self.truth;
        let best = job
            .throughput
            .fastest(job.workers)
            .map(|(_, r)| r)
            .unwrap_or(f64::NAN);
        JobOutcome {
            id: job.id,
            kind: job.kind.clone(),
            workers: job.workers,
            arrival_s: job.arrival_s,
            first_start_s: self.state.first_start_s.unwrap_or(self.stop_s),
            finish_s: self.stop_s,
            restarts: self.restarts,
            isolated_s: job.total_steps / best,
            mean_contention: if self.in_system_s > 0.0 {
                self.contention_s / self.in_system_s
            } else {
                1.0
            },
        }
    }
}

/// The jobs whose copies still run at `now`, as the policy would see them running.
fn in_flight(active: &[Tracked], now: f64) -> Vec<JobState> {
    active
        .iter()
        .filter(|t| t.in_flight(now))
        .map(|t| t.state.clone())
        .collect()
}

fn add_contention(active: &mut [Tracked], dt: f64) {
    let n = active.len() as f64;
    for t in active {
        t.contention_s += n * dt;
        t.in_system_s += dt;
    }
}
