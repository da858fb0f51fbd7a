//! HadarE's consolidation step: averages the safetensors checkpoints of a forked job's
//! copies with weights proportional to the steps each copy did (`steps_k / sum(steps)`).
//!
//! * [`header`]: strict parsing of the safetensors header (a checkpoint is untrusted input).
//! * [`dtype`]: every dtype the format defines, and how each is averaged or carried over.
//! * [`weights`]: turning `FILE:STEPS` arguments or a Job Tracker record into weights.
//! * [`write`]: writing safetensors files atomically (temp file, fsync, rename).
//! * [`outer`]: consolidation with an outer optimizer (Nesterov momentum on the copies'
//!   mean update), whose velocity is kept in a momentum-state file.
//!
//! Inputs are memory-mapped and processed tensor by tensor in fixed-size chunks, so memory
//! use does not grow with the checkpoint and checkpoints larger than memory work. The output
//! has the first input's header byte for byte (names, dtypes, shapes, offsets, metadata), so
//! it loads wherever the first input loaded.

pub mod dtype;
pub mod header;
pub mod outer;
pub mod weights;
pub mod write;

use dtype::{Codec, Dtype, Treatment};
use header::{Header, HeaderError, TensorInfo};
use memmap2::Mmap;
use outer::{OuterFiles, OuterOptimizer};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use weights::{WeightsError, normalise_weights, parse_input_spec};

/// What to do with tensors that are not averaged (integers, booleans, exponent-only
/// scales, packed sub-byte floats) when the inputs disagree on them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IntegerPolicy {
    /// They must be identical in every input; a difference is refused, naming the tensor.
    /// Safe default: such tensors are usually indices, masks or vocabularies, which copies
    /// of one job never change.
    #[default]
    Identical,
    /// Take the first input's values. For counters that copies advance independently,
    /// such as BatchNorm's `num_batches_tracked`.
    First,
}

/// Tuning of the averaging loop.
#[derive(Clone, Copy, Debug)]
pub struct AverageOptions {
    /// How non-averaged tensors are treated when inputs differ.
    pub integers: IntegerPolicy,
    /// Scalars processed per chunk; bounds memory (about 8 bytes of accumulator each).
    pub chunk_scalars: usize,
}

impl Default for AverageOptions {
    fn default() -> Self {
        AverageOptions {
            integers: IntegerPolicy::Identical,
            chunk_scalars: 1 << 16,
        }
    }
}

/// Why averaging failed. Every variant names the file or tensor at fault.
#[derive(Debug, thiserror::Error)]
pub enum AverageError {
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error (not a `source`: it is part of the one-line message).
        error: std::io::Error,
    },
    /// A checkpoint's header is malformed.
    #[error("{path}: not a valid safetensors file: {reason}")]
    Header {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: HeaderError,
    },
    /// No inputs.
    #[error("no checkpoints to average")]
    NoInputs,
    /// The number of weights differs from the number of inputs.
    #[error("{weights} weights for {inputs} checkpoints")]
    WeightCount {
        /// Weights given.
        weights: usize,
        /// Inputs given.
        inputs: usize,
    },
    /// A weight is negative or not finite.
    #[error("weight {weight} for {path} is not a finite non-negative number")]
    BadWeight {
        /// The file.
        path: PathBuf,
        /// The weight.
        weight: f64,
    },
    /// A tensor is in one input but not another.
    #[error("tensor `{tensor}` is in {present} but not in {missing}")]
    MissingTensor {
        /// The tensor.
        tensor: String,
        /// A file that has it.
        present: PathBuf,
        /// A file that lacks it.
        missing: PathBuf,
    },
    /// Two inputs disagree on a tensor's dtype.
    #[error("tensor `{tensor}` is {first_dtype} in {first} but {other_dtype} in {other}")]
    DtypeMismatch {
        /// The tensor.
        tensor: String,
        /// The first input.
        first: PathBuf,
        /// Its dtype there.
        first_dtype: Dtype,
        /// The disagreeing input.
        other: PathBuf,
        /// Its dtype there.
        other_dtype: Dtype,
    },
    /// Two inputs disagree on a tensor's shape.
    #[error(
        "tensor `{tensor}` has shape {first_shape:?} in {first} but {other_shape:?} in {other}"
    )]
    ShapeMismatch {
        /// The tensor.
        tensor: String,
        /// The first input.
        first: PathBuf,
        /// Its shape there.
        first_shape: Vec<u64>,
        /// The disagreeing input.
        other: PathBuf,
        /// Its shape there.
        other_shape: Vec<u64>,
    },
    /// A non-averaged tensor differs between inputs under [`IntegerPolicy::Identical`].
    #[error(
        "tensor `{tensor}` ({dtype}) differs between {first} and {other} (first difference at byte {byte}); {dtype} tensors are not averaged: they must be identical, or pass --integers first"
    )]
    ExactTensorDiffers {
        /// The tensor.
        tensor: String,
        /// Its dtype.
        dtype: Dtype,
        /// The first input.
        first: PathBuf,
        /// The disagreeing input.
        other: PathBuf,
        /// Byte offset within the tensor of the first difference.
        byte: u64,
    },
    /// The output path has no file name.
    #[error("{0}: not a file path")]
    BadOutput(PathBuf),
    /// An outer-optimizer parameter is out of range.
    #[error("{name} {value} is out of range; expected {expected}")]
    OuterParameter {
        /// Which parameter.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The valid range.
        expected: &'static str,
    },
    /// A momentum-state file does not fit the checkpoints.
    #[error("momentum state {path}: {reason}")]
    MomentumState {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Momentum above 0 with nowhere to keep the velocity.
    #[error(
        "outer momentum {0} needs a momentum-state file to keep the velocity between rounds (--momentum-state FILE)"
    )]
    MomentumWithoutState(f64),
}

/// An opened, validated checkpoint.
pub struct Checkpoint {
    path: PathBuf,
    map: Mmap,
    header: Header,
}

impl Checkpoint {
    /// Opens and maps `path` and validates its header. Nothing but the header is read.
    pub fn open(path: &Path) -> Result<Self, AverageError> {
        let io = |error| AverageError::Io {
            path: path.to_path_buf(),
            error,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        // SAFETY: the map is read-only. A checkpoint truncated by another process while we
        // read it would fault (SIGBUS); checkpoints are written once by the copies and only
        // read here, which is the same assumption every safetensors loader makes.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = header::parse_header(&map, len).map_err(|reason| AverageError::Header {
            path: path.to_path_buf(),
            reason,
        })?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(Checkpoint {
            path: path.to_path_buf(),
            map,
            header,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// A tensor's bytes.
    pub fn data(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.header.data_start() + t.begin) as usize;
        &self.map[start..start + t.len() as usize]
    }

    fn header_bytes(&self) -> &[u8] {
        &self.map[..self.header.data_start() as usize]
    }
}

/// What an averaging run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Tensors written.
    pub tensors: usize,
    /// Tensors averaged (the rest were carried over exactly).
    pub averaged: usize,
    /// Bytes of tensor data read over all inputs.
    pub bytes_read: u64,
    /// Bytes written (header and data).
    pub bytes_written: u64,
    /// The normalised weights used, in input order.
    pub weights: Vec<f64>,
}

/// Checks that every input has the same tensors with the same dtypes and shapes as the
/// first, naming the first disagreement.
pub fn check_compatible(inputs: &[Checkpoint]) -> Result<(), AverageError> {
    let Some(first) = inputs.first() else {
        return Err(AverageError::NoInputs);
    };
    for other in &inputs[1..] {
        for t in &first.header.tensors {
            let Some(o) = other.header.tensor(&t.name) else {
                return Err(AverageError::MissingTensor {
                    tensor: t.name.clone(),
                    present: first.path.clone(),
                    missing: other.path.clone(),
                });
            };
            if o.dtype != t.dtype {
                return Err(AverageError::DtypeMismatch {
                    tensor: t.name.clone(),
                    first: first.path.clone(),
                    first_dtype: t.dtype,
                    other: other.path.clone(),
                    other_dtype: o.dtype,
                });
            }
            if o.shape != t.shape {
                return Err(AverageError::ShapeMismatch {
                    tensor: t.name.clone(),
                    first: first.path.clone(),
                    first_shape: t.shape.clone(),
                    other: other.path.clone(),
                    other_shape: o.shape.clone(),
                });
            }
        }
        if let Some(extra) = other
            .header
            .tensors
            .iter()
            .find(|o| first.header.tensor(&o.name).is_none())
        {
            return Err(AverageError::MissingTensor {
                tensor: extra.name.clone(),
                present: other.path.clone(),
                missing: first.path.clone(),
            });
        }
    }
    Ok(())
}

/// Averages `inputs` (paths with raw weights, normalised here to sum to 1) into `out`,
/// atomically: `out` is either untouched or holds the complete result.
pub fn average_files(
    inputs: &[(PathBuf, f64)],
    out: &Path,
    opts: &AverageOptions,
) -> Result<Summary, AverageError> {
    consolidate(inputs, out, opts, None)
}

/// Consolidates `inputs` into `out`: their weighted mean, or with `outer`, an outer
/// optimizer step from the round's start along the mean's update (see [`outer`]). `out` and
/// the new momentum state are staged side by side and renamed only once both are complete:
/// the output first, then the state. A crash between the two renames leaves the old state,
/// so repeating the same call (same inputs, same state file) gives the same output and
/// applies the momentum once.
pub fn consolidate(
    inputs: &[(PathBuf, f64)],
    out: &Path,
    opts: &AverageOptions,
    outer: Option<(&OuterOptimizer, &OuterFiles)>,
) -> Result<Summary, AverageError> {
    if inputs.is_empty() {
        return Err(AverageError::NoInputs);
    }
    for (path, w) in inputs {
        if !(w.is_finite() && *w >= 0.0) {
            return Err(AverageError::BadWeight {
                path: path.clone(),
                weight: *w,
            });
        }
    }
    if let Some((o, f)) = outer {
        o.validate()?;
        if o.momentum > 0.0 && f.momentum_out.is_none() {
            return Err(AverageError::MomentumWithoutState(o.momentum));
        }
    }
    let raw: Vec<f64> = inputs.iter().map(|(_, w)| *w).collect();
    let weights = hadar_consolidation::consolidation_weights(&raw);
    let mut checkpoints = inputs
        .iter()
        .map(|(p, _)| Checkpoint::open(p))
        .collect::<Result<Vec<_>, _>>()?;
    let Some((opt, files)) = outer else {
        check_compatible(&checkpoints)?;
        let (bytes_written, mut summary) = write::atomically(out, |w| {
            average_into(&checkpoints, &weights, opts, None, out, w)
        })?;
        summary.bytes_written = bytes_written;
        summary.weights = weights;
        return Ok(summary);
    };
    // The start must match the copies like another copy would: checked together, so a
    // difference names the start's path.
    checkpoints.push(Checkpoint::open(&files.start)?);
    check_compatible(&checkpoints)?;
    let start = checkpoints.pop().expect("pushed above");
    let averaged: Vec<&TensorInfo> = checkpoints[0]
        .header
        .tensors
        .iter()
        .filter(|t| t.dtype.treatment() == Treatment::Averaged)
        .collect();
    let layout = outer::velocity_layout(&averaged);
    let velocity_in = match &files.momentum_from {
        Some(p) => {
            let c = Checkpoint::open(p)?;
            outer::check_velocity(&c, &layout, &checkpoints[0].path)?;
            Some(c)
        }
        None => None,
    };
    let staged_out = write::Staged::new(out)?;
    let staged_v = files
        .momentum_out
        .as_deref()
        .map(write::Staged::new)
        .transpose()?;
    let mut w = staged_out.writer();
    let mut vw = staged_v.as_ref().map(|s| s.writer());
    let velocity_path = files.momentum_out.clone().unwrap_or_default();
    if let Some(vw) = vw.as_mut() {
        vw.write_all(&outer::velocity_header(&layout))
            .map_err(write::io_at(&velocity_path))?;
    }
    let step = OuterStep {
        opt: *opt,
        start: &start,
        velocity_in: velocity_in.as_ref(),
        velocity_out: vw
            .as_mut()
            .map(|w| (w as &mut dyn Write, velocity_path.as_path())),
    };
    let mut summary = average_into(&checkpoints, &weights, opts, Some(step), out, &mut w)?;
    summary.bytes_written = staged_out.finish(w)?;
    if let (Some(s), Some(vw)) = (&staged_v, vw) {
        s.finish(vw)?;
    }
    staged_out.commit()?;
    if let Some(s) = staged_v {
        s.commit()?;
    }
    summary.weights = weights;
    Ok(summary)
}

/// The outer step's inputs and velocity output for one consolidation.
struct OuterStep<'a> {
    opt: OuterOptimizer,
    start: &'a Checkpoint,
    velocity_in: Option<&'a Checkpoint>,
    velocity_out: Option<(&'a mut dyn Write, &'a Path)>,
}

/// Streams the weighted average of compatible checkpoints into `w`, or, with `outer`, the
/// outer optimizer's step from the start along it (and the new velocity into its writer).
fn average_into(
    inputs: &[Checkpoint],
    weights: &[f64],
    opts: &AverageOptions,
    mut outer: Option<OuterStep<'_>>,
    out: &Path,
    w: &mut dyn Write,
) -> Result<Summary, AverageError> {
    let first = &inputs[0];
    w.write_all(first.header_bytes())
        .map_err(write::io_at(out))?;
    let mut chunks = Chunks::new(opts.chunk_scalars.max(1));
    let mut summary = Summary {
        tensors: 0,
        averaged: 0,
        bytes_read: 0,
        bytes_written: 0,
        weights: Vec::new(),
    };
    // Each input's copy of every tensor, looked up once by name.
    let per_input: Vec<Vec<&TensorInfo>> = inputs
        .iter()
        .map(|c| {
            first
                .header
                .tensors
                .iter()
                .map(|t| c.header.tensor(&t.name).unwrap_or(t))
                .collect()
        })
        .collect();
    for (ti, t) in first.header.tensors.iter().enumerate() {
        let slices: Vec<&[u8]> = inputs
            .iter()
            .zip(&per_input)
            .map(|(c, ts)| c.data(ts[ti]))
            .collect();
        summary.bytes_read += t.len() * inputs.len() as u64;
        summary.tensors += 1;
        match t.dtype.treatment() {
            Treatment::Averaged => {
                summary.averaged += 1;
                chunks.average_tensor(t, &slices, weights, outer.as_mut(), out, w)?;
            }
            Treatment::Exact => {
                if opts.integers == IntegerPolicy::Identical {
                    check_identical(inputs, t, &slices)?;
                }
                w.write_all(slices[0]).map_err(write::io_at(out))?;
            }
        }
    }
    Ok(summary)
}

/// An error naming the first byte where an input's copy of exact tensor `t` differs from
/// the first input's.
fn check_identical(
    inputs: &[Checkpoint],
    t: &TensorInfo,
    slices: &[&[u8]],
) -> Result<(), AverageError> {
    for (k, s) in slices.iter().enumerate().skip(1) {
        if let Some(byte) = slices[0].iter().zip(s.iter()).position(|(a, b)| a != b) {
            return Err(AverageError::ExactTensorDiffers {
                tensor: t.name.clone(),
                dtype: t.dtype,
                first: inputs[0].path.clone(),
                other: inputs[k].path.clone(),
                byte: byte as u64,
            });
        }
    }
    Ok(())
}

/// The scratch space of the averaging, one chunk of a tensor at a time, reused across
/// tensors so memory stays bounded by the chunk size whatever the checkpoint's size.
struct Chunks {
    codec: Codec,
    scalars: usize,
    acc: Vec<f64>,
    start: Vec<f64>,
    velocity: Vec<f64>,
    buf: Vec<u8>,
    vbuf: Vec<u8>,
}

impl Chunks {
    fn new(scalars: usize) -> Self {
        Chunks {
            codec: Codec::new(),
            scalars,
            acc: vec![0.0f64; scalars],
            start: vec![0.0f64; scalars],
            velocity: vec![0.0f64; scalars],
            buf: Vec::with_capacity(scalars * 8),
            vbuf: Vec::new(),
        }
    }

    /// Writes the weighted average of the inputs' copies (`slices`) of tensor `t` into `w`
    /// (the file `out`), or with `outer` the outer step from the start along it.
    fn average_tensor(
        &mut self,
        t: &TensorInfo,
        slices: &[&[u8]],
        weights: &[f64],
        mut outer: Option<&mut OuterStep<'_>>,
        out: &Path,
        w: &mut dyn Write,
    ) -> Result<(), AverageError> {
        let sb = t.dtype.scalar_bytes();
        let vd = outer::velocity_dtype(t.dtype);
        let vsb = vd.scalar_bytes();
        // The start's and the old velocity's bytes of this tensor (outer step only).
        let start_bytes = outer.as_ref().map(|o| o.start.data(lookup(o.start, t)));
        let velocity_bytes = outer
            .as_ref()
            .and_then(|o| o.velocity_in)
            .map(|v| v.data(lookup(v, t)));
        let step = self.scalars * sb;
        let mut off = 0usize;
        let len = t.len() as usize;
        while off < len {
            let end = (off + step).min(len);
            let n = (end - off) / sb;
            let acc = &mut self.acc[..n];
            // -0.0 is the additive identity (0.0 would turn an average of -0.0s into +0.0).
            acc.fill(-0.0);
            for (s, wk) in slices.iter().zip(weights) {
                if *wk != 0.0 {
                    self.codec.accumulate(t.dtype, &s[off..end], *wk, acc);
                }
            }
            if let Some(o) = outer.as_mut() {
                let start = &mut self.start[..n];
                let velocity = &mut self.velocity[..n];
                start.fill(-0.0);
                if let Some(sbytes) = start_bytes {
                    self.codec
                        .accumulate(t.dtype, &sbytes[off..end], 1.0, start);
                }
                velocity.fill(0.0);
                if let Some(vbytes) = velocity_bytes {
                    velocity.fill(-0.0);
                    let (voff, vend) = (off / sb * vsb, end / sb * vsb);
                    self.codec
                        .accumulate(vd, &vbytes[voff..vend], 1.0, velocity);
                }
                for ((m, s), v) in acc.iter_mut().zip(start.iter()).zip(velocity.iter_mut()) {
                    (*m, *v) = o.opt.step(*m, *s, *v);
                }
                if let Some((vw, vpath)) = o.velocity_out.as_mut() {
                    self.vbuf.clear();
                    self.codec.encode(vd, velocity, &mut self.vbuf);
                    vw.write_all(&self.vbuf).map_err(write::io_at(vpath))?;
                }
            }
            self.buf.clear();
            self.codec.encode(t.dtype, acc, &mut self.buf);
            w.write_all(&self.buf).map_err(write::io_at(out))?;
            off = end;
        }
        Ok(())
    }
}

/// The tensor of `c` with `t`'s name (`c` was checked to have it).
fn lookup<'c>(c: &'c Checkpoint, t: &'c TensorInfo) -> &'c TensorInfo {
    c.header.tensor(&t.name).unwrap_or(t)
}

#[cfg(test)]
mod tests;
