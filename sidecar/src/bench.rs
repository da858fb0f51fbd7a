//! `hadar bench`: speed figures, measured on this machine, printed for the docs (docs/simulator.md and others).

use crate::Failure;
use crate::cli::{
    BenchAverageArgs, BenchCommand, BenchDtype, BenchReadSlurmArgs, BenchRoundArgs,
    BenchRoundPolicy, BenchSimulateArgs, Format,
};
use crate::table::Table;
use hadar_core::policies::hadar::synthetic::{self, SyntheticSpec};
use hadar_core::policies::hadar::{RoundStats, plan_round};
use hadar_core::policies::hadare;
use hadar_core::policies::{self, PolicyName, PolicyOptions};
use hadar_core::site::reservations::{Chosen, Nodes, Offer, plan_in_pools};
use hadar_core::{Cluster, JobId, JobState, RoundInput, RoundPlan};
use hadar_formats::synthetic::{Arrivals, TraceSpec, generate_jobs};
use hadar_formats::{embedded, load_cluster};
use hadar_sim::{SimConfig, Workload, simulate};
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// CPU time this thread has used, in milliseconds. Beside wall time it shows what a run costs
/// on a machine that other work shares: on an idle core the two are equal.
pub fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// Runs a bench subcommand.
pub fn run(cmd: BenchCommand) -> Result<(), Failure> {
    match cmd {
        BenchCommand::Simulate(a) => simulate_bench(a),
        BenchCommand::Round(a) => round_bench(a),
        BenchCommand::Average(a) => average_bench(a),
        BenchCommand::ReadSlurm(a) => read_slurm_bench(a),
        BenchCommand::Snapshot(a) => crate::bench_snapshot::run(a),
    }
}

/// Times the daemon's two readers of Slurm's job listing on answers of `--jobs` jobs.
fn read_slurm_bench(a: BenchReadSlurmArgs) -> Result<(), Failure> {
    if a.jobs == 0 || a.repetitions == 0 {
        return Err(Failure::input(anyhow::anyhow!(
            "--jobs and --repetitions must be at least 1"
        )));
    }
    let (json_text, text) =
        crate::bench_answers::scaled_answers(a.jobs).map_err(Failure::runtime)?;
    let time = |f: &dyn Fn() -> usize| {
        f();
        let mut ms: Vec<f64> = (0..a.repetitions)
            .map(|_| {
                let started = Instant::now();
                let n = f();
                assert_eq!(n, a.jobs as usize, "every job read");
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        ms[ms.len() / 2]
    };
    let json_ms = time(&|| {
        hadar_slurm::json::parse_jobs(&json_text)
            .expect("the scaled answer reads")
            .len()
    });
    let text_ms = time(&|| hadar_slurm::job::parse_jobs(&text).0.len());
    println!("{} jobs, median of {} runs:", a.jobs, a.repetitions);
    println!(
        "  JSON  {:>8.1} MB  {:>8.1} ms",
        json_text.len() as f64 / 1e6,
        json_ms
    );
    println!(
        "  text  {:>8.1} MB  {:>8.1} ms",
        text.len() as f64 / 1e6,
        text_ms
    );
    Ok(())
}

/// Times Hadar rounds on a synthetic workload: one untimed warm-up, then `repetitions`
/// timed ones, each planning the same round from scratch.
fn round_bench(a: BenchRoundArgs) -> Result<(), Failure> {
    for (flag, value) in [
        ("--repetitions", a.repetitions),
        ("--excluded-nodes", a.excluded_nodes),
    ] {
        if value == 0 {
            return Err(Failure::input(anyhow::anyhow!(
                "{flag}: must be at least 1"
            )));
        }
    }
    let spec = SyntheticSpec {
        jobs: a.jobs,
        nodes: a.nodes,
        gpus_per_node: a.gpus_per_node,
        types: a.types,
        seed: a.seed,
    };
    let workload =
        synthetic::generate(&spec).map_err(|e| Failure::input(anyhow::anyhow!("--{e}")))?;
    let config = a.hadar.config();
    let hadare_config = a.hadar.hadare_config();
    let input = workload.input();
    let offers = excluding_offers(
        &workload.cluster,
        &workload.jobs,
        a.excluding,
        a.excluded_nodes,
    );
    let running: BTreeSet<JobId> = workload
        .jobs
        .iter()
        .filter(|j| j.placement.is_some())
        .map(|j| j.id())
        .collect();
    let plan_once = || match a.policy {
        BenchRoundPolicy::Hadar if offers.is_empty() => plan_round(&config, &input),
        BenchRoundPolicy::Hadar => {
            let mut calls: Vec<RoundStats> = Vec::new();
            let plan = plan_in_pools(
                &workload.cluster,
                &workload.jobs,
                &offers,
                &running,
                |c, js| {
                    let (p, s) = plan_round(
                        &config,
                        &RoundInput {
                            cluster: c,
                            jobs: js,
                            ..input
                        },
                    );
                    calls.push(s);
                    p
                },
            );
            (plan, final_stats(&calls))
        }
        BenchRoundPolicy::Hadare => (
            hadare::plan_round(&hadare_config, &input),
            RoundStats::default(),
        ),
    };
    let (warm_plan, stats) = plan_once();
    warm_plan
        .validate(&workload.cluster, &workload.jobs)
        .map_err(|e| {
            Failure::runtime(anyhow::anyhow!(
                "{} broke a rule: {e}",
                policy_name(a.policy)
            ))
        })?;
    let moved = moved(&workload.jobs, &warm_plan);
    let times = Timings::of(a.repetitions, || plan_once().0);
    let summary = RoundSummary {
        gpus: workload.cluster.total_gpus(),
        excluding: offers.len(),
        placed: warm_plan.assignments.len(),
        stats,
        running: running.len(),
        moved,
    };
    crate::output::emit(&render_round(&a, &summary, &times)?)?;
    Ok(())
}

/// Milliseconds of repeated runs.
struct Timings {
    median: f64,
    max: f64,
    min: f64,
}

impl Timings {
    /// Times `run` `repetitions` times (at least once).
    fn of<T>(repetitions: u32, mut run: impl FnMut() -> T) -> Timings {
        let mut times = Vec::with_capacity(repetitions as usize);
        for _ in 0..repetitions.max(1) {
            let started = Instant::now();
            std::hint::black_box(run());
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let median = if times.len() % 2 == 1 {
            times[times.len() / 2]
        } else {
            (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
        };
        Timings {
            median,
            max: times[times.len() - 1],
            min: times[0],
        }
    }
}

/// What `bench round` reports of its warm-up plan.
struct RoundSummary {
    gpus: u32,
    excluding: usize,
    placed: usize,
    stats: RoundStats,
    running: usize,
    moved: usize,
}

/// `bench round`'s output in `a.format`.
fn render_round(a: &BenchRoundArgs, r: &RoundSummary, times: &Timings) -> Result<String, Failure> {
    let (median, max, min) = (times.median, times.max, times.min);
    let (stats, moved) = (&r.stats, r.moved);
    let release = !cfg!(debug_assertions);
    Ok(match a.format {
        Format::Table => {
            let mut out = format!(
                "{} round: {} jobs ({} excluding a node) on {} GPUs ({} nodes x {}, {} types), seed {}; build: {}\n",
                policy_name(a.policy),
                a.jobs,
                r.excluding,
                r.gpus,
                a.nodes,
                a.gpus_per_node,
                a.types,
                a.seed,
                if release {
                    "release"
                } else {
                    "debug (use --release for figures)"
                }
            );
            out.push_str(&match a.policy {
                BenchRoundPolicy::Hadar => format!(
                    "placed {} jobs: {} admitted by price, {} by work conservation, {} kept in place; {} of {} running jobs moved or stopped\n",
                    r.placed,
                    stats.admitted,
                    stats.filled,
                    stats.kept,
                    moved,
                    r.running
                ),
                BenchRoundPolicy::Hadare => format!("placed {} jobs\n", r.placed),
            });
            let mut t = Table::new(&["repetitions", "median ms", "max ms", "min ms"]);
            t.row(vec![
                a.repetitions.to_string(),
                format!("{median:.2}"),
                format!("{max:.2}"),
                format!("{min:.2}"),
            ]);
            out.push_str(&t.render());
            out
        }
        Format::Json => {
            let v = json!({
                "policy": policy_name(a.policy),
                "median_ms": median,
                "max_ms": max,
                "min_ms": min,
                "repetitions": a.repetitions,
                "jobs": a.jobs,
                "excluding": r.excluding,
                "nodes": a.nodes,
                "gpus_per_node": a.gpus_per_node,
                "types": a.types,
                "gpus": r.gpus,
                "seed": a.seed,
                "release": release,
                "placed": r.placed,
                "admitted": stats.admitted,
                "filled": stats.filled,
                "kept": stats.kept,
                "running": r.running,
                "moved": moved,
            });
            serde_json::to_string_pretty(&v).map_err(Failure::runtime)? + "\n"
        }
    })
}

/// The statistics of the plan `plan_in_pools` returned from its calls of the planner: the
/// whole plan's when it stood (one call), else the pools' (every call after the first)
/// added up.
fn final_stats(calls: &[RoundStats]) -> RoundStats {
    let pools = if calls.len() > 1 { &calls[1..] } else { calls };
    let mut out = RoundStats::default();
    for s in pools {
        out.admitted += s.admitted;
        out.filled += s.filled;
        out.kept += s.kept;
    }
    out
}

/// How many of the jobs with a placement `plan` gives another one or none.
fn moved(jobs: &[JobState], plan: &RoundPlan) -> usize {
    jobs.iter()
        .filter_map(|j| Some((j.id(), j.placement.as_ref()?)))
        .filter(|(id, now)| {
            plan.assignments
                .iter()
                .find(|a| a.job == *id)
                .is_none_or(|a| a.placement != **now)
        })
        .count()
}

/// The offers of `bench round --excluding N --excluded-nodes K`: job i of the first N
/// excludes the K nodes from node i on (modulo the node count).
fn excluding_offers(cluster: &Cluster, jobs: &[JobState], n: u32, k: u32) -> HashMap<JobId, Offer> {
    let nodes = cluster.nodes();
    jobs.iter()
        .take(n as usize)
        .enumerate()
        .map(|(i, j)| {
            let names: BTreeSet<String> = (0..k as usize)
                .map(|d| nodes[(i + d) % nodes.len()].name.clone())
                .collect();
            let chosen = Chosen {
                options: format!(
                    "--exclude={}",
                    names.iter().cloned().collect::<Vec<_>>().join(",")
                ),
                nodes: Nodes::Except(names),
            };
            (j.id(), Offer::all().and_chosen(&chosen))
        })
        .collect()
}

/// The policy's name as `--policy` spells it.
fn policy_name(p: BenchRoundPolicy) -> &'static str {
    match p {
        BenchRoundPolicy::Hadar => "hadar",
        BenchRoundPolicy::Hadare => "hadare",
    }
}

fn simulate_bench(a: BenchSimulateArgs) -> Result<(), Failure> {
    let names = match &a.policy {
        Some(list) => PolicyName::parse_list(list)
            .map_err(|e| Failure::input(anyhow::anyhow!("--policy: {e}")))?,
        None => PolicyName::ALL.to_vec(),
    };
    if a.jobs == 0 {
        return Err(Failure::input(anyhow::anyhow!(
            "--jobs: must be at least 1"
        )));
    }
    let cluster = match &a.cluster {
        Some(spec) => load_cluster(spec, a.gpus_per_node).map_err(Failure::input)?,
        None => embedded::cluster().map_err(Failure::runtime)?,
    };
    let table = embedded::throughputs().map_err(Failure::runtime)?;
    let spec = TraceSpec {
        jobs: a.jobs,
        multi_gpu: true,
        arrivals: Arrivals::Static,
        seed: a.seed,
    };
    let jobs = generate_jobs(&table, &cluster, &spec);
    let workload = Workload { cluster, jobs };
    let cfg = SimConfig {
        seed: a.seed,
        ..SimConfig::default()
    };
    let opts = PolicyOptions {
        seed: a.seed,
        ..PolicyOptions::default()
    };

    let mut rows = Vec::new();
    let all = Instant::now();
    let all_cpu = thread_cpu_ms();
    for name in names {
        let started = Instant::now();
        let started_cpu = thread_cpu_ms();
        let (rounds, ttd) = play_policy(name, &workload, &opts, &cfg)?;
        rows.push((
            name,
            started.elapsed().as_secs_f64() * 1e3,
            thread_cpu_ms() - started_cpu,
            rounds,
            ttd,
        ));
    }
    let total_ms = all.elapsed().as_secs_f64() * 1e3;
    let total_cpu_ms = thread_cpu_ms() - all_cpu;

    print_simulate_bench(&a, &workload, &rows, (total_ms, total_cpu_ms))
}

/// One row of `hadar bench simulate`: the policy, wall and CPU milliseconds, rounds, TTD s.
type SimulateRow = (PolicyName, f64, f64, u64, f64);

/// Plays policy `name` on `workload` (or computes the bound): its rounds and TTD seconds.
fn play_policy(
    name: PolicyName,
    workload: &Workload,
    opts: &PolicyOptions,
    cfg: &SimConfig,
) -> Result<(u64, f64), Failure> {
    if name.is_bound() {
        let ttd = policies::bound(name, &workload.cluster, &workload.jobs)
            .map_err(|e| Failure::runtime(anyhow::anyhow!("computing `{name}`: {e}")))?;
        return Ok((0, ttd));
    }
    let mut p = policies::build(name, opts).ok_or_else(|| {
        Failure::input(anyhow::anyhow!(
            "--policy: `{name}` is not available in this build"
        ))
    })?;
    let r = simulate(workload, p.as_mut(), cfg)
        .map_err(|e| Failure::runtime(anyhow::anyhow!("simulating `{name}`: {e}")))?;
    Ok((r.metrics.rounds, r.metrics.ttd_s))
}

/// Prints `hadar bench simulate`'s figures as a table or JSON.
fn print_simulate_bench(
    a: &BenchSimulateArgs,
    workload: &Workload,
    rows: &[SimulateRow],
    (total_ms, total_cpu_ms): (f64, f64),
) -> Result<(), Failure> {
    match a.format {
        Format::Table => {
            println!(
                "{} jobs (synthetic, multi-GPU, seed {}) on {}; build: {}",
                workload.jobs.len(),
                a.seed,
                workload.cluster,
                if cfg!(debug_assertions) {
                    "debug (use --release for figures)"
                } else {
                    "release"
                }
            );
            let mut t = Table::new(&["policy", "wall ms", "cpu ms", "rounds", "TTD h"]);
            for (name, ms, cpu, rounds, ttd) in rows {
                t.row(vec![
                    name.to_string(),
                    format!("{ms:.1}"),
                    format!("{cpu:.1}"),
                    rounds.to_string(),
                    format!("{:.2}", ttd / 3600.0),
                ]);
            }
            t.row(vec![
                "all".into(),
                format!("{total_ms:.1}"),
                format!("{total_cpu_ms:.1}"),
            ]);
            print!("{}", t.render());
        }
        Format::Json => {
            let v = json!({
                "jobs": workload.jobs.len(),
                "gpus": workload.cluster.total_gpus(),
                "release": !cfg!(debug_assertions),
                "total_ms": total_ms,
                "total_cpu_ms": total_cpu_ms,
                "policies": rows.iter().map(|(n, ms, cpu, rounds, ttd)| json!({"policy": n.as_str(), "wall_ms": ms, "cpu_ms": cpu, "rounds": rounds, "ttd_s": ttd})).collect::<Vec<_>>(),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(Failure::runtime)?
            );
        }
    }
    Ok(())
}

/// Tensors of the generated checkpoints: 64 MiB, a typical size for a large layer.
const BENCH_TENSOR_BYTES: u64 = 64 << 20;

fn average_bench(a: BenchAverageArgs) -> Result<(), Failure> {
    use hadar_average::dtype::Dtype;
    if !(a.size_gb.is_finite() && a.size_gb > 0.0 && a.size_gb <= 1000.0) {
        return Err(Failure::input(anyhow::anyhow!(
            "--size-gb: must be above 0 and at most 1000, got {}",
            a.size_gb
        )));
    }
    if a.copies < 2 || a.repeat == 0 {
        return Err(Failure::input(anyhow::anyhow!(
            "--copies must be at least 2 and --repeat at least 1"
        )));
    }
    let dtype = match a.dtype {
        BenchDtype::F32 => Dtype::F32,
        BenchDtype::Bf16 => Dtype::BF16,
        BenchDtype::F16 => Dtype::F16,
    };
    let elem = dtype.bits() / 8;
    let total = (a.size_gb * 1e9) as u64 / elem * elem;
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("hadar-bench-average.")
        .tempdir_in(&base)
        .map_err(|e| Failure::runtime(anyhow::anyhow!("{}: {e}", base.display())))?;
    let mut layout = Vec::new();
    let mut left = total;
    while left > 0 {
        let len = left.min(BENCH_TENSOR_BYTES);
        layout.push((format!("layer{:04}.weight", layout.len()), len));
        left -= len;
    }
    let gen_started = Instant::now();
    let mut inputs = Vec::new();
    for k in 0..a.copies {
        let path = dir.path().join(format!("copy{k}.safetensors"));
        write_bench_checkpoint(&path, dtype, &layout, k as u64).map_err(Failure::runtime)?;
        inputs.push((path, 1000.0 + 100.0 * k as f64));
    }
    let gen_s = gen_started.elapsed().as_secs_f64();
    let out = dir.path().join("merged.safetensors");
    let mut runs = Vec::new();
    for _ in 0..a.repeat {
        let started = Instant::now();
        let s =
            hadar_average::average_files(&inputs, &out, &hadar_average::AverageOptions::default())
                .map_err(Failure::runtime)?;
        let secs = started.elapsed().as_secs_f64();
        runs.push((
            secs,
            s.bytes_read as f64 / secs / 1e9,
            s.bytes_written as f64 / secs / 1e9,
        ));
    }
    let mut by_speed = runs.clone();
    by_speed.sort_by(|x, y| x.1.total_cmp(&y.1));
    let median = by_speed[by_speed.len() / 2];
    println!(
        "hadar average: {} copies x {:.2} GB ({} tensors of {}), {} run(s); build: {}; inputs generated in {gen_s:.1} s",
        a.copies,
        total as f64 / 1e9,
        layout.len(),
        dtype,
        a.repeat,
        if cfg!(debug_assertions) {
            "debug (use --release for figures)"
        } else {
            "release"
        }
    );
    let mut t = Table::new(&["run", "seconds", "read GB/s", "written GB/s"]);
    for (i, (secs, rd, wr)) in runs.iter().enumerate() {
        t.row(vec![
            (i + 1).to_string(),
            format!("{secs:.2}"),
            format!("{rd:.2}"),
            format!("{wr:.2}"),
        ]);
    }
    t.row(vec![
        "median".into(),
        format!("{:.2}", median.0),
        format!("{:.2}", median.1),
        format!("{:.2}", median.2),
    ]);
    print!("{}", t.render());
    Ok(())
}

/// Writes a checkpoint of pseudo-random values in the range [-1, 1), one tensor at a time.
fn write_bench_checkpoint(
    path: &std::path::Path,
    dtype: hadar_average::dtype::Dtype,
    layout: &[(String, u64)],
    seed: u64,
) -> anyhow::Result<()> {
    use hadar_average::dtype::Dtype;
    let elem = dtype.bits() / 8;
    let entries: Vec<_> = layout
        .iter()
        .map(|(n, len)| (n.as_str(), dtype, vec![len / elem], *len))
        .collect();
    let header = hadar_average::write::header_bytes(None, &entries);
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    hadar_average::write::atomically(path, |w| {
        let err = |error| hadar_average::AverageError::Io {
            path: path.to_path_buf(),
            error,
        };
        w.write_all(&header).map_err(err)?;
        let mut buf = Vec::with_capacity(1 << 20);
        for (_, len) in layout {
            let mut left = *len;
            while left > 0 {
                buf.clear();
                let n = left.min(1 << 20);
                while (buf.len() as u64) < n {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let x = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
                    match dtype {
                        Dtype::BF16 => {
                            buf.extend_from_slice(&half::bf16::from_f32(x).to_le_bytes())
                        }
                        Dtype::F16 => buf.extend_from_slice(&half::f16::from_f32(x).to_le_bytes()),
                        _ => buf.extend_from_slice(&x.to_le_bytes()),
                    }
                }
                w.write_all(&buf).map_err(err)?;
                left -= n;
            }
        }
        Ok(())
    })?;
    Ok(())
}
