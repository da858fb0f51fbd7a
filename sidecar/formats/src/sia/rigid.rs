//! A rigid job as Sia's simulator runs it for its Gavel baseline: a fixed number of GPUs
//! packed onto as few nodes as they fit, at the batch size the workload gives, with gradient
//! accumulation where a GPU cannot hold its share of the batch.
//!
//! Sia's job advances by `gain(batch, epoch) / iteration_s / slowdown` units of progress a
//! second, and completes when its progress reaches that of its last epoch. Here that becomes
//! a number of steps and a rate per GPU type: the steps are iterations at the requested
//! batch size, `sum over epochs of progress(e) / gain(batch, e)`, and a type's rate is such
//! that the job's time alone on that type is Sia's (`docs/results-sia.md`, "The model").

use super::apps::{App, GpuKind};
use super::profile::{Placements, Validation, interpolate, placement_id};

/// How a rigid job splits its batch on one placement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Split {
    /// Samples each GPU processes per pass.
    pub atomic_bsz: u32,
    /// Extra passes accumulated before each synchronisation.
    pub accum_steps: u32,
    /// The batch the job really trains at: GPUs x atomic batch x passes.
    pub batch: u32,
}

/// Why a job cannot run on a GPU kind in Sia's model.
#[derive(Clone, Debug, PartialEq)]
pub enum Unprofiled {
    /// The placement was never measured (and no scalability row covers it).
    Placement(String),
    /// The placement's measurements do not reach the local batch size the job needs.
    Batch {
        /// The placement.
        placement: String,
        /// The local batch size needed.
        local_bsz: u32,
    },
    /// The batch the job would train at is outside the validated batch sizes.
    Efficiency(u32),
}

impl std::fmt::Display for Unprofiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unprofiled::Placement(p) => write!(f, "placement {p} was not profiled"),
            Unprofiled::Batch {
                placement,
                local_bsz,
            } => write!(
                f,
                "placement {placement} was not profiled at a local batch size of {local_bsz}"
            ),
            Unprofiled::Efficiency(b) => {
                write!(f, "its batch {b} is outside the validated batch sizes")
            }
        }
    }
}

/// GPUs per node of `gpus` GPUs packed onto nodes of `per_node`: whole nodes, then the rest
/// (Sia's rigid placement).
pub fn packed(gpus: u32, per_node: u32) -> Vec<u32> {
    let mut p = vec![per_node; (gpus / per_node) as usize];
    if gpus % per_node != 0 {
        p.push(gpus % per_node);
    }
    p
}

/// Ceiling of `x`, forgiving a rounding error below 1e-8 as Sia's arithmetic does.
fn ceil(x: f64) -> u32 {
    (x - 1e-8).ceil().max(0.0) as u32
}

/// How `batch` splits over `placement` (Sia's `Job.update_local_bsz` with batch-size tuning
/// off).
pub fn split(
    placements: &Placements,
    validation: &Validation,
    placement: &[u32],
    batch: u32,
) -> Result<Split, Unprofiled> {
    let id = placement_id(placement);
    let replicas: u32 = placement.iter().sum();
    let nodes = placement.iter().filter(|g| **g > 0).count() as u32;
    let (init_bsz, max_bsz) = validation.batch_range();
    let max_local = placements
        .max_local_bsz(&id, nodes, replicas)
        .ok_or_else(|| Unprofiled::Placement(id.clone()))?;
    let local = ceil(f64::from(batch) / f64::from(replicas));
    let mut accum = ceil(f64::from(local) / max_local).saturating_sub(1);
    if replicas == 1 && batch > init_bsz {
        accum = accum.max(1);
    }
    let mut atomic = ceil(f64::from(local) / f64::from(accum + 1));
    if let Some(fits) = placements.max_local_bsz_of_replicas(replicas) {
        atomic = atomic.min(fits as u32);
    }
    let count = replicas * (accum + 1);
    atomic = atomic.min(max_bsz / count);
    Ok(Split {
        atomic_bsz: atomic,
        accum_steps: accum,
        batch: replicas * atomic * (accum + 1),
    })
}

/// Seconds of one iteration (all accumulated passes and one synchronisation) of `split` on
/// `placement`.
pub fn iteration_s(
    placements: &Placements,
    placement: &[u32],
    split: Split,
) -> Result<f64, Unprofiled> {
    let id = placement_id(placement);
    let nodes = placement.iter().filter(|g| **g > 0).count() as u32;
    let timings = placements
        .timings_like(&id, nodes, placement.iter().sum())
        .ok_or_else(|| Unprofiled::Placement(id.clone()))?;
    let (step, sync) =
        interpolate(&timings, f64::from(split.atomic_bsz)).ok_or(Unprofiled::Batch {
            placement: id,
            local_bsz: split.atomic_bsz,
        })?;
    Ok(step + f64::from(split.accum_steps) * (step - sync))
}

/// Iterations at `batch` that take the job through its epochs: each epoch's progress over
/// its gain at that batch.
pub fn iterations(validation: &Validation, app: &App, batch: u32) -> Result<f64, Unprofiled> {
    (0..app.epochs)
        .map(|e| {
            let progress = validation.progress(e + 1) - validation.progress(e);
            let gain = validation
                .gain(f64::from(batch), e)
                .filter(|g| g.is_finite() && *g > 0.0)
                .ok_or(Unprofiled::Efficiency(batch))?;
            Ok(progress / gain)
        })
        .sum()
}

/// `gpus` GPUs spread as evenly as they go over `nodes` nodes of `per_node` (`10` over 3:
/// `4,3,3`); `None` when they do not fit or would leave a node empty.
pub fn even(gpus: u32, nodes: u32, per_node: u32) -> Option<Vec<u32>> {
    if nodes == 0 || gpus < nodes || gpus.div_ceil(nodes) > per_node {
        return None;
    }
    let (base, extra) = (gpus / nodes, gpus % nodes);
    Some((0..nodes).map(|i| base + u32::from(i < extra)).collect())
}

/// Seconds the job takes alone on `placement` (GPUs per node of one kind), training at
/// `batch`.
pub fn isolated_on(
    placements: &Placements,
    validation: &Validation,
    app: &App,
    placement: &[u32],
    batch: u32,
) -> Result<f64, Unprofiled> {
    let split = split(placements, validation, placement, batch)?;
    let iteration = iteration_s(placements, placement, split)?;
    Ok(iterations(validation, app, split.batch)? * iteration * app.slowdown)
}

/// Seconds the job takes alone on `kind` (packed), training at `batch` with `gpus` GPUs.
pub fn isolated_s(
    placements: &Placements,
    validation: &Validation,
    app: &App,
    kind: &GpuKind,
    gpus: u32,
    batch: u32,
) -> Result<f64, Unprofiled> {
    isolated_on(
        placements,
        validation,
        app,
        &packed(gpus, kind.gpus_per_node),
        batch,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gangs_pack_whole_nodes_first() {
        assert_eq!(packed(6, 4), vec![4, 2]);
        assert_eq!(packed(16, 8), vec![8, 8]);
        assert_eq!(packed(3, 8), vec![3]);
        assert_eq!(packed(10, 4), vec![4, 4, 2]);
    }

    #[test]
    fn a_spread_gang_is_as_even_as_it_goes() {
        assert_eq!(even(10, 3, 4), Some(vec![4, 3, 3]));
        assert_eq!(even(6, 3, 4), Some(vec![2, 2, 2]));
        assert_eq!(even(6, 1, 4), None);
        assert_eq!(even(2, 3, 4), None);
    }
}
