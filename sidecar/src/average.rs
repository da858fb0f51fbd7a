//! `hadar average`: HadarE's consolidation step from the command line. Parses the
//! checkpoints and their steps (from arguments or a Job Tracker record) and calls
//! `hadar_average`, which does the streaming and the atomic write.

use crate::Failure;
use crate::cli::{AverageArgs, Format, IntegersArg, OuterArg};
use hadar_average::outer::{OuterFiles, OuterOptimizer};
use hadar_average::weights::read_tracker;
use hadar_average::{AverageError, AverageOptions, IntegerPolicy, consolidate, parse_input_spec};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

/// Runs the command.
pub fn run(a: AverageArgs) -> Result<(), Failure> {
    let inputs = inputs(&a)?;
    let opts = AverageOptions {
        integers: match a.integers {
            IntegersArg::Identical => IntegerPolicy::Identical,
            IntegersArg::First => IntegerPolicy::First,
        },
        ..AverageOptions::default()
    };
    let outer = outer(&a)?;
    let started = Instant::now();
    let summary = consolidate(&inputs, &a.out, &opts, outer.as_ref().map(|(o, f)| (o, f)))
        .map_err(|e| match &e {
            // Only writing the outputs is a failure while running; everything else is the
            // inputs' fault and nothing was written.
            AverageError::Io { path, .. }
                if *path == a.out || Some(path) == a.momentum_state.as_ref() =>
            {
                Failure::runtime(e)
            }
            _ => Failure::input(e),
        })?;
    let seconds = started.elapsed().as_secs_f64();
    match a.format {
        Format::Table => {
            let weights: Vec<String> = inputs
                .iter()
                .zip(&summary.weights)
                .map(|((p, s), w)| format!("{} ({s} steps, weight {w:.4})", p.display()))
                .collect();
            println!(
                "averaged {} checkpoints: {}",
                inputs.len(),
                weights.join(", ")
            );
            println!(
                "wrote {}: {} tensors ({} averaged, {} carried over), {} bytes, in {seconds:.2} s",
                a.out.display(),
                summary.tensors,
                summary.averaged,
                summary.tensors - summary.averaged,
                summary.bytes_written
            );
            if let Some((o, f)) = &outer {
                println!(
                    "outer Nesterov step from {}: lr {}, momentum {}{}",
                    f.start.display(),
                    o.lr,
                    o.momentum,
                    f.momentum_out
                        .as_ref()
                        .map(|p| format!(", velocity in {}", p.display()))
                        .unwrap_or_default()
                );
            }
        }
        Format::Json => {
            let v = json!({
                "out": a.out.display().to_string(),
                "inputs": inputs.iter().zip(&summary.weights).map(|((p, s), w)| json!({"path": p.display().to_string(), "steps": s, "weight": w})).collect::<Vec<_>>(),
                "tensors": summary.tensors,
                "averaged": summary.averaged,
                "bytes_read": summary.bytes_read,
                "bytes_written": summary.bytes_written,
                "seconds": seconds,
                "outer": outer.as_ref().map(|(o, f)| json!({
                    "method": "nesterov", "lr": o.lr, "momentum": o.momentum,
                    "start": f.start.display().to_string(),
                    "momentum_from": f.momentum_from.as_ref().map(|p| p.display().to_string()),
                    "momentum_state": f.momentum_out.as_ref().map(|p| p.display().to_string()),
                })),
            });
            println!("{v}");
        }
    }
    Ok(())
}

/// The outer optimizer's parameters and files, checked for a coherent combination.
fn outer(a: &AverageArgs) -> Result<Option<(OuterOptimizer, OuterFiles)>, Failure> {
    let bad = |msg: &str| Failure::input(anyhow::anyhow!("{msg}"));
    if a.outer == OuterArg::Mean {
        let given = [
            ("--start", a.start.is_some()),
            ("--outer-lr", a.outer_lr != 1.0),
            ("--outer-momentum", a.outer_momentum != 0.0),
            ("--momentum-state", a.momentum_state.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            return Err(bad(&format!(
                "{flag} is for --outer nesterov; plain averaging (--outer mean) takes none"
            )));
        }
        return Ok(None);
    }
    let Some(start) = a.start.clone() else {
        return Err(bad(
            "--outer nesterov needs --start S.safetensors: the checkpoint the copies started from",
        ));
    };
    let momentum_from = match (&a.momentum_from, &a.momentum_state) {
        (Some(from), _) => {
            if !from.is_file() {
                return Err(bad(&format!(
                    "--momentum-from {}: no such file (omit it for a zero velocity)",
                    from.display()
                )));
            }
            Some(from.clone())
        }
        // The state file is read when it exists: absent means the first round (zero).
        (None, Some(state)) if state.exists() && !a.momentum_zero => Some(state.clone()),
        _ => None,
    };
    Ok(Some((
        OuterOptimizer {
            lr: a.outer_lr,
            momentum: a.outer_momentum,
        },
        OuterFiles {
            start,
            momentum_from,
            momentum_out: a.momentum_state.clone(),
        },
    )))
}

/// The checkpoints with their steps, from the arguments or a tracker record.
fn inputs(a: &AverageArgs) -> Result<Vec<(PathBuf, f64)>, Failure> {
    let bad = |msg: String| Failure::input(anyhow::anyhow!(msg));
    let specs = a
        .inputs
        .iter()
        .map(|s| parse_input_spec(s).map_err(Failure::input))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(file) = &a.weights_from else {
        if specs.is_empty() {
            return Err(bad(
                "give the checkpoints as FILE:STEPS, or --weights-from a Job Tracker file".into(),
            ));
        }
        return specs
            .into_iter()
            .zip(&a.inputs)
            .map(|((path, steps), arg)| match steps {
                Some(s) => Ok((path, s)),
                None => Err(bad(format!(
                    "`{arg}`: give the steps this copy did as FILE:STEPS (or use --weights-from)"
                ))),
            })
            .collect();
    };
    let text = std::fs::read_to_string(file)
        .map_err(|e| bad(format!("--weights-from {}: {e}", file.display())))?;
    let record = read_tracker(&text, a.job, a.round, a.policy.as_deref())
        .map_err(|e| bad(format!("--weights-from {}: {e}", file.display())))?;
    let where_ = format!(
        "--weights-from {} (job {}, round {})",
        file.display(),
        record.job,
        record.round
    );
    if let Some(arg) = specs
        .iter()
        .zip(&a.inputs)
        .find_map(|((_, s), arg)| s.map(|_| arg))
    {
        return Err(bad(format!(
            "`{arg}`: with --weights-from the steps come from the record; give plain FILEs"
        )));
    }
    let paths: Vec<PathBuf> = if specs.is_empty() {
        record
            .checkpoints
            .iter()
            .enumerate()
            .map(|(k, c)| {
                c.clone().ok_or_else(|| {
                    bad(format!(
                        "{where_}: copy {k} names no checkpoint; give the FILEs in copy order"
                    ))
                })
            })
            .collect::<Result<_, _>>()?
    } else {
        specs.into_iter().map(|(p, _)| p).collect()
    };
    if paths.len() != record.steps.len() {
        return Err(bad(format!(
            "{where_}: the record has {} copies but {} checkpoints were given",
            record.steps.len(),
            paths.len()
        )));
    }
    Ok(paths.into_iter().zip(record.steps).collect())
}
