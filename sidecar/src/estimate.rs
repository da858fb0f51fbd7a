//! `hadar estimate`: print a job type's estimated throughput, or judge the estimator against
//! a measured table (leave-one-job-out accuracy and online refinement convergence).

use crate::Failure;
use crate::cli::{EstimateArgs, Format};
use crate::table::Table;
use hadar_core::estimate::evaluate::{EvalReport, Measurement, ReplaySettings, evaluate};
use hadar_core::estimate::{
    GpuCatalog, GpuSpec, ModelConstants, WORKER_COUNTS, estimate_rate, gavel_job, gavel_job_traits,
    step_time,
};
use hadar_formats::ThroughputTable;
use serde_json::json;
use std::path::Path;

/// Runs the command.
pub fn run(a: EstimateArgs) -> Result<(), Failure> {
    let replay = ReplaySettings {
        noise: a.noise,
        seed: a.seed,
        tolerance: a.tolerance,
        max_rounds: a.rounds,
    };
    if !(a.noise.is_finite() && (0.0..1.0).contains(&a.noise)) {
        return Err(Failure::input(anyhow::anyhow!(
            "--noise: must be at least 0 and below 1, got {}",
            a.noise
        )));
    }
    if !(a.tolerance.is_finite() && a.tolerance > 0.0) {
        return Err(Failure::input(anyhow::anyhow!(
            "--tolerance: must be a positive fraction, got {}",
            a.tolerance
        )));
    }
    if a.rounds == 0 {
        return Err(Failure::input(anyhow::anyhow!(
            "--rounds: must be at least 1"
        )));
    }
    match (&a.evaluate, &a.job_type) {
        (Some(path), _) => run_evaluate(path, &replay, a.format),
        (None, Some(name)) => run_job(name, a.gpus.as_deref(), a.format),
        (None, None) => Err(Failure::input(anyhow::anyhow!(
            "give --evaluate FILE or --job-type NAME"
        ))),
    }
}

fn run_evaluate(path: &Path, replay: &ReplaySettings, format: Format) -> Result<(), Failure> {
    let table = ThroughputTable::load(path).map_err(Failure::input)?;
    let mut measurements = Vec::new();
    for job in table.job_types() {
        for gpu in table.gpu_types() {
            for &(workers, rate) in table.points(job, gpu) {
                measurements.push(Measurement {
                    job_type: job.to_string(),
                    gpu_type: gpu.clone(),
                    workers,
                    rate,
                });
            }
        }
    }
    let report = evaluate(
        &measurements,
        &gavel_job_traits(),
        &GpuCatalog::builtin(),
        replay,
    )
    .map_err(|e| Failure::input(anyhow::anyhow!("{}: {e}", path.display())))?;
    let held_out = held_out_types(&table);
    match format {
        Format::Table => print!(
            "{}{}",
            render_report(path, &report),
            render_held_out(&held_out)
        ),
        Format::Json => {
            let mut v = serde_json::to_value(&report).map_err(Failure::runtime)?;
            v["file"] = json!(path.display().to_string());
            v["held_out_gpu_types"] = json!(
                held_out
                    .iter()
                    .map(|h| json!({
                        "gpu_type": h.gpu_type,
                        "points": h.points,
                        "calibrated_mape_pct": h.calibrated_mape_pct,
                        "calibrated_median_ape_pct": h.calibrated_median_ape_pct,
                        "uncalibrated_mape_pct": h.uncalibrated_mape_pct,
                    }))
                    .collect::<Vec<_>>()
            );
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(Failure::runtime)?
            );
        }
    }
    Ok(())
}

/// How well a GPU type the table lacks is estimated: each of the table's types held out in
/// turn, every measured (job type, workers) point on it predicted by
/// `ThroughputTable::estimated_rate` from the table without it.
struct HeldOut {
    gpu_type: String,
    points: usize,
    calibrated_mape_pct: f64,
    calibrated_median_ape_pct: f64,
    /// The estimator alone, without the calibration on the job's other types.
    uncalibrated_mape_pct: f64,
}

fn held_out_types(table: &ThroughputTable) -> Vec<HeldOut> {
    let k = ModelConstants::default();
    let catalog = GpuCatalog::builtin();
    let mut out = Vec::new();
    for g in table.gpu_types() {
        let Some(spec) = catalog.lookup(g) else {
            continue;
        };
        let without = table.without_gpu_type(g);
        let (mut calibrated, mut plain) = (Vec::new(), Vec::new());
        for job in table.job_types() {
            let Some(traits) = gavel_job(job) else {
                continue;
            };
            for &(workers, measured) in table.points(job, g) {
                if measured <= 0.0 {
                    continue;
                }
                let (Some(c), Some(p)) = (
                    without.estimated_rate(job, g, workers),
                    estimate_rate(&traits, spec, workers, &k),
                ) else {
                    continue;
                };
                calibrated.push(100.0 * (c - measured).abs() / measured);
                plain.push(100.0 * (p - measured).abs() / measured);
            }
        }
        if calibrated.is_empty() {
            continue;
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let mut sorted = calibrated.clone();
        sorted.sort_by(f64::total_cmp);
        out.push(HeldOut {
            gpu_type: g.clone(),
            points: calibrated.len(),
            calibrated_mape_pct: mean(&calibrated),
            calibrated_median_ape_pct: sorted[sorted.len() / 2],
            uncalibrated_mape_pct: mean(&plain),
        });
    }
    out
}

fn render_held_out(held: &[HeldOut]) -> String {
    if held.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\na GPU type the table lacks (how the daemon, dry-run and simulate rate jobs on an A100 or H100), each measured type held out in turn:\n\
         estimated from the job's traits and the GPU's datasheet, calibrated on the job's measured rates on the other types\n",
    );
    let mut t = Table::new(&[
        "held-out type",
        "points",
        "calibrated MAPE %",
        "median APE %",
        "uncalibrated MAPE %",
    ]);
    for h in held {
        t.row(vec![
            h.gpu_type.clone(),
            h.points.to_string(),
            pct(h.calibrated_mape_pct),
            pct(h.calibrated_median_ape_pct),
            pct(h.uncalibrated_mape_pct),
        ]);
    }
    out.push_str(&t.render());
    out
}

fn pct(x: f64) -> String {
    format!("{x:.1}")
}

/// The evaluation of the estimator against the table at `path`, as text: accuracy per GPU
/// type, the estimated and measured rates side by side, how fast online refinement
/// converges, and what was skipped.
fn render_report(path: &Path, r: &EvalReport) -> String {
    let k = &r.constants_all;
    let mut out = format!(
        "estimator vs measured table {} ({} job types x {} GPU types)\n\
         each job type is predicted with constants fitted on the other job types (leave-one-job-out)\n\
         constants fitted on all job types: efficiency {:.3}, pre-Pascal factor {:.3}, step overhead {:.2} ms, layer overhead {:.3} ms\n\n",
        path.display(),
        r.jobs.len(),
        r.gpu_types.len(),
        k.efficiency,
        k.pre_pascal_factor,
        k.step_overhead_s * 1e3,
        k.layer_overhead_s * 1e3,
    );
    out.push_str(&render_accuracy(r));
    out.push_str(&render_rates(r));
    out.push_str(&render_refinement(r));
    if !r.skipped_job_types.is_empty() {
        out.push_str(&format!(
            "skipped job types (no traits): {}\n",
            r.skipped_job_types.join(", ")
        ));
    }
    if !r.skipped_gpu_types.is_empty() {
        out.push_str(&format!(
            "skipped GPU types (not in the GPU table): {}\n",
            r.skipped_gpu_types.join(", ")
        ));
    }
    out
}

/// The leave-one-job-out accuracy per GPU type and overall, with the in-sample error for
/// contrast.
fn render_accuracy(r: &EvalReport) -> String {
    let mut t = Table::new(&[
        "GPU type",
        "jobs",
        "MAPE %",
        "median APE %",
        "Spearman",
        "Kendall",
        "multi-worker MAPE %",
    ]);
    for p in &r.per_type {
        t.row(vec![
            p.gpu_type.clone(),
            p.jobs.to_string(),
            pct(p.mape_pct),
            pct(p.median_ape_pct),
            format!("{:.3}", p.spearman),
            format!("{:.3}", p.kendall),
            p.multi_worker_mape_pct.map(pct).unwrap_or_default(),
        ]);
    }
    let o = &r.overall;
    t.row(vec![
        "overall".into(),
        o.points.to_string(),
        pct(o.mape_pct),
        pct(o.median_ape_pct),
        format!("{:.3}", o.spearman),
        format!("{:.3}", o.kendall),
        o.multi_worker_mape_pct.map(pct).unwrap_or_default(),
    ]);
    let mut out = t.render();
    out.push_str(&format!(
        "mean per-type Spearman {:.3}; in-sample MAPE with constants fitted on all job types {}% (for contrast)\n\n",
        o.mean_type_spearman,
        pct(o.in_sample_mape_pct)
    ));
    out
}

/// Each job type's single-worker rate per GPU type, estimated beside measured.
fn render_rates(r: &EvalReport) -> String {
    let mut out = String::from("single-worker steps/s, estimated / measured:\n");
    let mut header = vec!["job type".to_string()];
    header.extend(r.gpu_types.iter().cloned());
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(&header_refs);
    for j in &r.jobs {
        let mut row = vec![j.job_type.clone()];
        for g in &r.gpu_types {
            row.push(
                j.rates
                    .iter()
                    .find(|c| &c.gpu_type == g)
                    .map(|c| format!("{:.2} / {:.2}", c.estimated, c.measured))
                    .unwrap_or_else(|| "-".into()),
            );
        }
        t.row(row);
    }
    out.push_str(&t.render());
    out
}

/// How many rounds of online refinement the estimates took to come within tolerance, and
/// what one observation on a type does to the estimates on the job's other types.
fn render_refinement(r: &EvalReport) -> String {
    let c = &r.refinement;
    let s = &c.settings;
    let mut out = format!(
        "\nonline refinement (each job observed on one GPU type per round; measurements = true rate x (1 + {} z), seed {}):\n\
         \x20 {} of {} (job, GPU type) cells within {}% after a median of {} rounds (90th percentile {}, max {}); {} already within from the prior; {} within at round {}\n",
        s.noise,
        s.seed,
        c.reached,
        c.cells,
        s.tolerance * 100.0,
        c.median_rounds
            .map(|m| format!("{m}"))
            .unwrap_or_else(|| "-".into()),
        c.p90_rounds
            .map(|m| m.to_string())
            .unwrap_or_else(|| "-".into()),
        c.max_rounds_needed
            .map(|m| m.to_string())
            .unwrap_or_else(|| "-".into()),
        c.prior_within,
        c.within_at_end,
        s.max_rounds,
    );
    for x in &c.cross_type {
        out.push_str(&format!(
            "  one observation on {}: MAPE on the job's other GPU types {}% -> {}%\n",
            x.observed_type,
            pct(x.others_prior_mape_pct),
            pct(x.others_after_one_mape_pct)
        ));
    }
    out
}

fn run_job(name: &str, gpus: Option<&str>, format: Format) -> Result<(), Failure> {
    let job = gavel_job(name).ok_or_else(|| {
        let known: Vec<String> = gavel_job_traits().into_iter().map(|j| j.name).collect();
        Failure::input(anyhow::anyhow!(
            "--job-type: unknown job type `{name}`; known: {}",
            known.join(", ")
        ))
    })?;
    let catalog = GpuCatalog::builtin();
    let specs: Vec<GpuSpec> = match gpus {
        None => catalog.specs().to_vec(),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(|g| {
                catalog.lookup(g).cloned().ok_or_else(|| {
                    let known: Vec<&str> =
                        catalog.specs().iter().map(|s| s.name.as_str()).collect();
                    Failure::input(anyhow::anyhow!(
                        "--gpus: unknown GPU type `{g}`; known: {}",
                        known.join(", ")
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if specs.is_empty() {
        return Err(Failure::input(anyhow::anyhow!("--gpus: no GPU type given")));
    }
    let k = ModelConstants::default();
    match format {
        Format::Table => {
            println!(
                "{}: {:.2} M parameters, {} GFLOPs forward per sample, batch {}, {} B input per sample, {} layers per step",
                job.name,
                job.params / 1e6,
                job.forward_gflops_per_sample,
                job.batch_size,
                job.input_bytes_per_sample,
                job.layers_per_step
            );
            let mut header = vec!["GPU".to_string()];
            header.extend(WORKER_COUNTS.iter().map(|n| format!("{n} w steps/s")));
            header.extend(["overhead ms", "compute ms", "memory ms", "input ms"].map(String::from));
            let refs: Vec<&str> = header.iter().map(String::as_str).collect();
            let mut t = Table::new(&refs);
            for g in &specs {
                let mut row = vec![g.name.clone()];
                row.extend(WORKER_COUNTS.iter().map(|&n| {
                    estimate_rate(&job, g, n, &k)
                        .map(|r| format!("{r:.3}"))
                        .unwrap_or_else(|| "-".into())
                }));
                let st = step_time(&job, g, 1, &k);
                row.extend(
                    [st.overhead_s, st.compute_s, st.memory_s, st.input_s]
                        .map(|s| format!("{:.2}", s * 1e3)),
                );
                t.row(row);
            }
            print!("{}", t.render());
        }
        Format::Json => {
            let v = json!({
                "job": job,
                "constants": k,
                "gpus": specs.iter().map(|g| json!({
                    "gpu_type": g.name,
                    "rates": WORKER_COUNTS.iter().map(|&n| json!({"workers": n, "steps_per_s": estimate_rate(&job, g, n, &k)})).collect::<Vec<_>>(),
                    "step_time_1_worker": step_time(&job, g, 1, &k),
                })).collect::<Vec<_>>(),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(Failure::runtime)?
            );
        }
    }
    Ok(())
}
