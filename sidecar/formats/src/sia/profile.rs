//! One application's measurements, read from Sia's profile files: step and sync times by
//! placement and local batch size on one GPU cluster (`placements-<cluster>.csv`, with
//! `scalability-<cluster>.csv` for placements beyond those), and the gradient statistics by
//! epoch at each validated batch size (`validation-<batch>.csv`).
//!
//! Columns are found by their header names, as the files order them differently.

use super::csv_rows::{Csv, Row};
use crate::error::{FormatError, Location};
use std::collections::BTreeMap;
use std::path::Path;

/// Step and sync seconds of one step at one local batch size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Samples per GPU per step.
    pub local_bsz: f64,
    /// Seconds of a whole step (computation and gradient synchronisation).
    pub step_s: f64,
    /// Seconds of its synchronisation.
    pub sync_s: f64,
}

/// An application's step times on one GPU cluster.
#[derive(Clone, Debug, Default)]
pub struct Placements {
    /// Placement (GPUs per node, as Sia writes it: `44` = two nodes of 4) -> its timings,
    /// sorted by local batch size.
    by_placement: BTreeMap<String, Vec<Timing>>,
    /// `(nodes, replicas)` -> the timings measured at that scale.
    scalability: Vec<(u32, u32, Timing)>,
}

impl Placements {
    /// Reads `placements-<cluster>.csv` and `scalability-<cluster>.csv` of `dir`.
    pub fn load(dir: &Path, cluster: &str) -> Result<Self, FormatError> {
        let path = dir.join(format!("placements-{cluster}.csv"));
        let rows = Csv::read(&path, &["placement", "local_bsz", "step_time", "sync_time"])?;
        let mut by_placement: BTreeMap<String, Vec<Timing>> = BTreeMap::new();
        for row in &rows.rows {
            let placement = row.text(0);
            if placement.is_empty() || !placement.bytes().all(|b| (b'1'..=b'9').contains(&b)) {
                return Err(row.invalid(
                    0,
                    format!(
                        "a placement is GPUs per node as digits 1-9 (`44`), found `{placement}`"
                    ),
                ));
            }
            let timing = row.timing(1)?;
            by_placement
                .entry(placement.to_string())
                .or_default()
                .push(timing);
        }
        for timings in by_placement.values_mut() {
            timings.sort_by(|a, b| a.local_bsz.total_cmp(&b.local_bsz));
        }
        let path = dir.join(format!("scalability-{cluster}.csv"));
        let scalability = if path.exists() {
            let rows = Csv::read(
                &path,
                &[
                    "num_nodes",
                    "num_replicas",
                    "local_bsz",
                    "step_time",
                    "sync_time",
                ],
            )?;
            rows.rows
                .iter()
                .map(|row| Ok((row.whole(0)?, row.whole(1)?, row.timing(2)?)))
                .collect::<Result<_, FormatError>>()?
        } else {
            Vec::new()
        };
        Ok(Placements {
            by_placement,
            scalability,
        })
    }

    /// The timings of `placement` (Sia's normalised form, [`placement_id`]), if profiled.
    pub fn timings(&self, placement: &str) -> Option<&[Timing]> {
        self.by_placement.get(placement).map(Vec::as_slice)
    }

    /// The timings of `placement` (of `nodes` nodes and `replicas` GPUs): its own where it
    /// was profiled; else, as Sia's fallback averages them, the mean of every profiled
    /// placement of as many nodes and GPUs at each local batch size; else the scalability
    /// rows of exactly that many nodes and GPUs. `None` when none of these exists (Sia
    /// would interpolate across node and GPU counts there; hadar does not).
    pub fn timings_like(&self, placement: &str, nodes: u32, replicas: u32) -> Option<Vec<Timing>> {
        if let Some(t) = self.timings(placement) {
            return Some(t.to_vec());
        }
        let mut sums: BTreeMap<u64, (Timing, u32)> = BTreeMap::new();
        let digits = |p: &str| p.bytes().map(|b| u32::from(b - b'0')).collect::<Vec<_>>();
        for (p, ts) in &self.by_placement {
            let d = digits(p);
            if d.len() as u32 != nodes || d.iter().sum::<u32>() != replicas {
                continue;
            }
            for t in ts {
                let e = sums.entry(t.local_bsz.to_bits()).or_insert((
                    Timing {
                        local_bsz: t.local_bsz,
                        step_s: 0.0,
                        sync_s: 0.0,
                    },
                    0,
                ));
                e.0.step_s += t.step_s;
                e.0.sync_s += t.sync_s;
                e.1 += 1;
            }
        }
        let mut out: Vec<Timing> = if sums.is_empty() {
            self.scalability
                .iter()
                .filter(|(n, r, _)| (*n, *r) == (nodes, replicas))
                .map(|(_, _, t)| *t)
                .collect()
        } else {
            sums.into_values()
                .map(|(t, k)| Timing {
                    step_s: t.step_s / f64::from(k),
                    sync_s: t.sync_s / f64::from(k),
                    ..t
                })
                .collect()
        };
        out.sort_by(|a, b| a.local_bsz.total_cmp(&b.local_bsz));
        (!out.is_empty()).then_some(out)
    }

    /// The largest local batch size measured for `placement` of `nodes` nodes and `replicas`
    /// GPUs: among its own timings, else among the scalability rows of at least that many
    /// nodes and replicas (as Sia's `get_max_local_bsz`).
    pub fn max_local_bsz(&self, placement: &str, nodes: u32, replicas: u32) -> Option<f64> {
        let largest = |it: &mut dyn Iterator<Item = f64>| it.reduce(f64::max);
        match self.timings(placement) {
            Some(t) => largest(&mut t.iter().map(|t| t.local_bsz)),
            None => largest(
                &mut self
                    .scalability
                    .iter()
                    .filter(|(n, r, _)| *n >= nodes && *r >= replicas)
                    .map(|(_, _, t)| t.local_bsz),
            ),
        }
    }

    /// The largest local batch size measured on any placement of `replicas` GPUs (Sia's
    /// memory correction of a rigid job's batch), if any was profiled.
    pub fn max_local_bsz_of_replicas(&self, replicas: u32) -> Option<f64> {
        self.by_placement
            .iter()
            .filter(|(p, _)| p.bytes().map(|b| u32::from(b - b'0')).sum::<u32>() == replicas)
            .flat_map(|(_, t)| t.iter().map(|t| t.local_bsz))
            .reduce(f64::max)
    }
}

/// Sia's name of a placement: GPUs per node with empty nodes dropped, rotated to the
/// lexicographically smallest rotation, as digits (`[4, 4, 2]` -> `244`).
pub fn placement_id(gpus_per_node: &[u32]) -> String {
    let p: Vec<u32> = gpus_per_node.iter().copied().filter(|g| *g > 0).collect();
    let best = (0..p.len())
        .map(|i| [&p[i..], &p[..i]].concat())
        .min()
        .unwrap_or_default();
    best.iter().map(u32::to_string).collect()
}

/// Step and sync seconds at `local_bsz`, linearly interpolated between the two nearest
/// measured batch sizes; `None` outside the measured range (Sia's `interp1d`, which raises
/// there).
pub fn interpolate(timings: &[Timing], local_bsz: f64) -> Option<(f64, f64)> {
    let first = timings.first()?;
    let last = timings.last()?;
    if !(first.local_bsz..=last.local_bsz).contains(&local_bsz) {
        return None;
    }
    let hi = timings
        .partition_point(|t| t.local_bsz < local_bsz)
        .clamp(1, timings.len().max(2) - 1);
    if timings.len() == 1 {
        return Some((first.step_s, first.sync_s));
    }
    let (a, b) = (&timings[hi - 1], &timings[hi]);
    let w = (local_bsz - a.local_bsz) / (b.local_bsz - a.local_bsz);
    Some((
        a.step_s + w * (b.step_s - a.step_s),
        a.sync_s + w * (b.sync_s - a.sync_s),
    ))
}

/// Gradient statistics in one epoch at one batch size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpochStats {
    /// Progress (iterations at the smallest validated batch size's efficiency) at the end of
    /// the epoch.
    pub progress: f64,
    /// Squared gradient norm.
    pub grad_sqr: f64,
    /// Gradient variance.
    pub grad_var: f64,
}

/// An application's statistical efficiency: its gradient statistics by epoch at each
/// validated batch size (Pollux's model, which Sia keeps).
#[derive(Clone, Debug, Default)]
pub struct Validation {
    by_batch: BTreeMap<u32, Vec<EpochStats>>,
}

impl Validation {
    /// Reads every `validation-<batch>.csv` of `dir`; `epochs` of each are needed.
    pub fn load(dir: &Path, epochs: usize) -> Result<Self, FormatError> {
        let listing = std::fs::read_dir(dir).map_err(|reason| FormatError::Io {
            path: dir.display().to_string(),
            reason,
        })?;
        let mut by_batch = BTreeMap::new();
        for entry in listing {
            let path = entry
                .map_err(|reason| FormatError::Io {
                    path: dir.display().to_string(),
                    reason,
                })?
                .path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let Some(batch) = name
                .strip_prefix("validation-")
                .and_then(|n| n.strip_suffix(".csv"))
            else {
                continue;
            };
            let batch: u32 = batch.parse().ok().filter(|b| *b > 0).ok_or_else(|| {
                FormatError::invalid(
                    Location::of(&path.display().to_string()),
                    "a validation file is named validation-<batch size>.csv",
                )
            })?;
            let rows = Csv::read(&path, &["progress", "grad_sqr", "grad_var"])?;
            if rows.rows.len() < epochs {
                return Err(FormatError::invalid(
                    Location::of(&path.display().to_string()),
                    format!(
                        "has {} epochs of statistics; the application trains for {epochs}",
                        rows.rows.len()
                    ),
                ));
            }
            let stats = rows
                .rows
                .iter()
                .map(|r| {
                    Ok(EpochStats {
                        progress: r.number(0)?,
                        grad_sqr: r.number(1)?,
                        grad_var: r.number(2)?,
                    })
                })
                .collect::<Result<Vec<_>, FormatError>>()?;
            by_batch.insert(batch, stats);
        }
        if by_batch.is_empty() {
            return Err(FormatError::invalid(
                Location::of(&dir.display().to_string()),
                "no validation-<batch size>.csv file: the statistical efficiency is unknown",
            ));
        }
        Ok(Validation { by_batch })
    }

    /// The smallest validated batch size (Sia's initial batch size, at which the
    /// efficiency is 1) and the largest.
    pub fn batch_range(&self) -> (u32, u32) {
        let first = self.by_batch.keys().next().copied().unwrap_or(1);
        let last = self.by_batch.keys().next_back().copied().unwrap_or(first);
        (first, last)
    }

    /// Progress at the end of epoch `e - 1` (0 for `e == 0`): the least any validated batch
    /// size reached then (Sia's `get_progress`).
    pub fn progress(&self, e: usize) -> f64 {
        if e == 0 {
            return 0.0;
        }
        self.by_batch
            .values()
            .map(|s| s[e - 1].progress)
            .fold(f64::INFINITY, f64::min)
    }

    /// The gain of training at `batch` in epoch `e`: progress per iteration, interpolated
    /// between the two validated batch sizes around it (Sia's `get_grad_stats` and the
    /// gain of its `Job.step`). `None` outside the validated range.
    pub fn gain(&self, batch: f64, e: usize) -> Option<f64> {
        let lower = self.by_batch.range(..=batch.floor() as u32).next_back();
        let upper = self.by_batch.range(batch.ceil() as u32..).next();
        let ((&lb, ls), (&ub, us)) = (lower?, upper?);
        let (ls, us) = (ls[e], us[e]);
        let (sqr, var) = if lb == ub {
            (ls.grad_sqr, ls.grad_var)
        } else {
            let w = (batch - lb as f64) / (ub - lb) as f64;
            (
                ls.grad_sqr + w * (us.grad_sqr - ls.grad_sqr),
                ls.grad_var + w * (us.grad_var - ls.grad_var),
            )
        };
        let scale = batch / self.batch_range().0 as f64;
        Some((var + sqr) / (var / scale + sqr))
    }
}

impl Row {
    /// Fields `i..i + 3` as a local batch size, step and sync seconds (a step positive and
    /// at least its sync).
    pub(super) fn timing(&self, i: usize) -> Result<Timing, FormatError> {
        let t = Timing {
            local_bsz: f64::from(self.whole(i)?),
            step_s: self.number(i + 1)?,
            sync_s: self.number(i + 2)?,
        };
        if t.step_s <= 0.0 || t.sync_s > t.step_s {
            return Err(self.invalid(
                i + 1,
                format!(
                    "a step must take longer than 0 s and at least its sync ({} s), found {} s",
                    t.sync_s, t.step_s
                ),
            ));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(b: f64, step: f64, sync: f64) -> Timing {
        Timing {
            local_bsz: b,
            step_s: step,
            sync_s: sync,
        }
    }

    #[test]
    fn placements_are_named_by_their_smallest_rotation() {
        assert_eq!(placement_id(&[4, 4, 2]), "244");
        assert_eq!(placement_id(&[8, 6]), "68");
        assert_eq!(placement_id(&[4, 2, 4]), "244");
        assert_eq!(placement_id(&[3, 0, 1]), "13");
        assert_eq!(placement_id(&[4]), "4");
    }

    #[test]
    fn timings_interpolate_inside_the_measured_range_only() {
        let ts = [t(32.0, 0.1, 0.01), t(64.0, 0.2, 0.03)];
        assert_eq!(interpolate(&ts, 32.0), Some((0.1, 0.01)));
        assert_eq!(interpolate(&ts, 64.0), Some((0.2, 0.03)));
        let (step, sync) = interpolate(&ts, 48.0).unwrap();
        assert!((step - 0.15).abs() < 1e-12 && (sync - 0.02).abs() < 1e-12);
        assert_eq!(interpolate(&ts, 31.0), None);
        assert_eq!(interpolate(&ts, 65.0), None);
        assert_eq!(interpolate(&[t(8.0, 1.0, 0.5)], 8.0), Some((1.0, 0.5)));
    }
}
