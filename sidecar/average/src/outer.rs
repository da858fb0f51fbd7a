//! Consolidation with an outer optimizer, as in local SGD / DiLoCo (Douillard et al., 2023):
//! the steps-weighted mean of the copies minus the round's start is a pseudo-gradient
//! (negated), and an outer Nesterov-momentum step applies it to the start:
//!
//! ```text
//! delta    = mean(copies, weighted by steps) - S
//! velocity = MU * velocity + delta               (zero before the first round that has one)
//! M        = S + LR * (MU * velocity + delta)
//! ```
//!
//! Everything is computed in f64 per scalar and rounded once to the tensor's dtype. With
//! `LR = 1, MU = 0`, `M` is the plain mean, bit for bit. The velocity is kept in a
//! safetensors file of its own (F32 for every averaged dtype narrower than F64; F64 and C64
//! keep their own dtype), one tensor per averaged tensor of the model, same names and
//! shapes. Integer and other exact tensors are not part of it: they follow
//! [`crate::IntegerPolicy`] as in plain averaging.
//!
//! The momentum state is read from one file and written to another (they may be the same
//! path): a caller that must repeat a consolidation after a crash (the daemon) derives round
//! k's state from round k-1's and never updates a file in place, so a repeated round reads
//! the same velocity and applies the momentum once.

use crate::dtype::Dtype;
use crate::header::TensorInfo;
use crate::{AverageError, Checkpoint};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `format` metadata of a momentum-state file, checked when it is read back.
pub const MOMENTUM_FORMAT: &str = "hadar-outer-momentum-v1";

/// Outer Nesterov momentum's two parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OuterOptimizer {
    /// The outer learning rate `LR`: 1 moves the model to the copies' mean (with no
    /// momentum), above 1 extrapolates past it, below 1 stays short of it.
    pub lr: f64,
    /// The momentum `MU`, in `[0, 1)`.
    pub momentum: f64,
}

impl OuterOptimizer {
    /// Plain averaging expressed as an outer step (`LR = 1, MU = 0`).
    pub const MEAN: OuterOptimizer = OuterOptimizer {
        lr: 1.0,
        momentum: 0.0,
    };

    /// Checks the parameters: `LR` finite and in `(0, 10]`, `MU` in `[0, 1)`.
    pub fn validate(&self) -> Result<(), AverageError> {
        if !(self.lr.is_finite() && self.lr > 0.0 && self.lr <= 10.0) {
            return Err(AverageError::OuterParameter {
                name: "outer learning rate",
                value: self.lr,
                expected: "a number above 0 and at most 10",
            });
        }
        if !(self.momentum.is_finite() && (0.0..1.0).contains(&self.momentum)) {
            return Err(AverageError::OuterParameter {
                name: "outer momentum",
                value: self.momentum,
                expected: "a number from 0 up to (not including) 1",
            });
        }
        Ok(())
    }

    /// True when the step is the plain mean (then `M` is computed as the mean itself, so
    /// that it equals today's averaging exactly: `S + (mean - S)` can differ from `mean`
    /// in the last bit of an f64).
    pub fn is_mean(&self) -> bool {
        self.lr == 1.0 && self.momentum == 0.0
    }

    /// One scalar's step: from the copies' mean `mean`, the start `s` and the previous
    /// velocity `v`, the new model value and the new velocity.
    #[inline]
    pub fn step(&self, mean: f64, s: f64, v: f64) -> (f64, f64) {
        let delta = mean - s;
        let velocity = self.momentum * v + delta;
        let m = if self.is_mean() {
            mean
        } else {
            s + self.lr * (self.momentum * velocity + delta)
        };
        (m, velocity)
    }
}

/// The files of one outer step.
#[derive(Clone, Debug)]
pub struct OuterFiles {
    /// The round's start `S` (the checkpoint every copy started from).
    pub start: PathBuf,
    /// The velocity to read; `None` means zero (the first round with momentum).
    pub momentum_from: Option<PathBuf>,
    /// Where to write the new velocity; `None` only when `MU = 0` (then there is none to
    /// keep).
    pub momentum_out: Option<PathBuf>,
}

/// The dtype a tensor's velocity is kept in: F32 for every averaged dtype narrower than F64
/// (a bf16 or f8 velocity would lose most of each round's update); F64 and C64 as they are.
pub fn velocity_dtype(d: Dtype) -> Dtype {
    match d {
        Dtype::F64 => Dtype::F64,
        Dtype::C64 => Dtype::C64,
        _ => Dtype::F32,
    }
}

/// The velocity tensors for a model's averaged tensors, as `(name, dtype, shape, bytes)`, in
/// the model's order.
pub(crate) fn velocity_layout(model: &[&TensorInfo]) -> Vec<(String, Dtype, Vec<u64>, u64)> {
    model
        .iter()
        .map(|t| {
            let vd = velocity_dtype(t.dtype);
            let scalars = t.len() / t.dtype.scalar_bytes() as u64;
            (
                t.name.clone(),
                vd,
                t.shape.clone(),
                scalars * vd.scalar_bytes() as u64,
            )
        })
        .collect()
}

/// The header of a momentum-state file for these tensors.
pub(crate) fn velocity_header(layout: &[(String, Dtype, Vec<u64>, u64)]) -> Vec<u8> {
    let mut meta = BTreeMap::new();
    meta.insert("format".to_string(), MOMENTUM_FORMAT.to_string());
    let refs: Vec<(&str, Dtype, Vec<u64>, u64)> = layout
        .iter()
        .map(|(n, d, s, l)| (n.as_str(), *d, s.clone(), *l))
        .collect();
    crate::write::header_bytes(Some(&meta), &refs)
}

/// Checks that a momentum-state file holds exactly the velocity of these tensors (the names,
/// dtypes and shapes [`velocity_layout`] gives), naming the first difference.
pub(crate) fn check_velocity(
    state: &Checkpoint,
    layout: &[(String, Dtype, Vec<u64>, u64)],
    model: &Path,
) -> Result<(), AverageError> {
    let bad = |reason: String| AverageError::MomentumState {
        path: state.path().to_path_buf(),
        reason,
    };
    let format = state
        .header()
        .metadata
        .as_ref()
        .and_then(|m| m.get("format"));
    if format.map(String::as_str) != Some(MOMENTUM_FORMAT) {
        return Err(bad(format!(
            "not a momentum-state file (its metadata has no format={MOMENTUM_FORMAT})"
        )));
    }
    for (name, dtype, shape, _) in layout {
        let Some(v) = state.header().tensor(name) else {
            return Err(bad(format!(
                "no velocity for tensor `{}` of {}; the state belongs to another model",
                crate::header::shown(name),
                model.display()
            )));
        };
        if v.dtype != *dtype || v.shape != *shape {
            return Err(bad(format!(
                "tensor `{}` is {} {:?} but {} needs {dtype} {shape:?}; the state belongs to another model",
                crate::header::shown(name),
                v.dtype,
                v.shape,
                model.display()
            )));
        }
    }
    if let Some(extra) = state
        .header()
        .tensors
        .iter()
        .find(|v| !layout.iter().any(|(n, ..)| *n == v.name))
    {
        return Err(bad(format!(
            "tensor `{}` is not a floating-point tensor of {}; the state belongs to another model",
            crate::header::shown(&extra.name),
            model.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_step_is_the_mean_bit_for_bit() {
        // S + (mean - S) would give 0 here: 1e-20 - 1 rounds to -1 in f64.
        let (m, v) = OuterOptimizer::MEAN.step(1e-20, 1.0, 123.0);
        assert_eq!(m, 1e-20);
        assert_eq!(v, 1e-20 - 1.0);
        assert_eq!(
            OuterOptimizer::MEAN.step(-0.0, -0.0, 0.0).0.to_bits(),
            (-0.0f64).to_bits()
        );
    }

    #[test]
    fn nesterov_follows_the_formula() {
        let o = OuterOptimizer {
            lr: 0.7,
            momentum: 0.9,
        };
        let (m, v) = o.step(2.0, 1.0, 0.5);
        assert_eq!(v, 0.9 * 0.5 + 1.0);
        assert_eq!(m, 1.0 + 0.7 * (0.9 * v + 1.0));
    }

    #[test]
    fn parameters_out_of_range_are_refused_by_name() {
        for (lr, mu, what) in [
            (0.0, 0.0, "outer learning rate"),
            (f64::NAN, 0.0, "outer learning rate"),
            (11.0, 0.0, "outer learning rate"),
            (1.0, 1.0, "outer momentum"),
            (1.0, -0.1, "outer momentum"),
        ] {
            let e = OuterOptimizer { lr, momentum: mu }
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains(what), "{e}");
        }
        assert!(
            OuterOptimizer {
                lr: 0.7,
                momentum: 0.9
            }
            .validate()
            .is_ok()
        );
    }
}
